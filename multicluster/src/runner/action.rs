//! What a reconcile (or a pass) returns — the one [`Action`] of every runner — and how it
//! ended as a bounded metric label ([`Outcome`]).

use std::{hash::Hash, time::Duration};

use crate::workqueue::WorkQueue;

/// What the runtime does with a key (or a pass runner with its next pass) afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until a watched object changes; the backoff is reset.
    AwaitChange,
    /// Reconcile again after this delay (unless a change comes earlier); backoff reset.
    Requeue(Duration),
    /// Something failed that retrying may fix: again after the next backoff step (1 s,
    /// doubling up to 60 s), or after `recheck` if that is sooner.
    Backoff {
        /// An earlier time to look again regardless of the backoff.
        recheck: Option<Duration>,
    },
}

impl Action {
    /// [`Action::Requeue`].
    pub fn requeue(after: Duration) -> Self {
        Action::Requeue(after)
    }

    /// [`Action::AwaitChange`].
    pub fn await_change() -> Self {
        Action::AwaitChange
    }

    /// [`Action::Backoff`] without an earlier recheck.
    pub fn backoff() -> Self {
        Action::Backoff { recheck: None }
    }

    /// Done, or a recheck after `after` when one is due.
    pub fn recheck(after: Option<Duration>) -> Self {
        after.map_or(Action::AwaitChange, Action::Requeue)
    }

    /// Hands `key` back to `queue` as this action says: a backoff grows the key's backoff
    /// (an earlier recheck still wins), anything else resets it. Call after
    /// [`WorkQueue::done`].
    pub fn requeue_in<K: Clone + Eq + Hash + Send + 'static>(self, queue: &WorkQueue<K>, key: K) {
        match self {
            Action::AwaitChange => queue.forget(&key),
            Action::Requeue(after) => {
                queue.forget(&key);
                queue.add_after(key, after);
            }
            Action::Backoff { recheck } => {
                queue.add_rate_limited(key.clone());
                if let Some(r) = recheck {
                    queue.add_after(key, r);
                }
            }
        }
    }
}

/// How a reconcile ended, as a bounded metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The reconciler returned `Ok` (and, in a runner, no backoff).
    Success,
    /// The reconciler returned an error (or, in a runner, asked to back off).
    Error,
    /// The object was not in the cache (deleted); only garbage collection ran.
    Missing,
    /// The object's cluster was not Ready; skipped until it is.
    ClusterNotReady,
}

impl Outcome {
    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Missing => "missing",
            Outcome::ClusterNotReady => "cluster_not_ready",
        }
    }

    /// The outcome a runner records for a reconcile that returned `action`.
    pub fn of(action: Action) -> Self {
        match action {
            Action::Backoff { .. } => Outcome::Error,
            Action::AwaitChange | Action::Requeue(_) => Outcome::Success,
        }
    }
}

/// What a reconcile hands back to a keyed runner: the [`Action`], and the [`Outcome`] it is
/// recorded as — [`Outcome::of`] the action, unless the reconciler says more (a
/// [`crate::Controller`] tells a missing object or an unready cluster apart).
pub trait Reconciled: Send {
    /// What happens to the key next.
    fn action(&self) -> Action;
    /// How the reconcile is recorded.
    fn outcome(&self) -> Outcome;
}

impl Reconciled for Action {
    fn action(&self) -> Action {
        *self
    }

    fn outcome(&self) -> Outcome {
        Outcome::of(*self)
    }
}

impl Reconciled for (Outcome, Action) {
    fn action(&self) -> Action {
        self.1
    }

    fn outcome(&self) -> Outcome {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_backoff_with_an_earlier_recheck_runs_at_the_recheck() {
        let q = WorkQueue::new();
        q.add("a");
        let key = q.next().await.expect("queued");
        q.done(&key);
        // Grow the backoff first: the second failure alone would wait 2 s.
        q.add_rate_limited("a");
        let key = q.next().await.expect("backed off");
        q.done(&key);
        let started = tokio::time::Instant::now();
        Action::Backoff {
            recheck: Some(Duration::from_millis(300)),
        }
        .requeue_in(&q, key);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    #[test]
    fn backoff_is_recorded_as_an_error_and_requeue_as_a_success() {
        assert_eq!(Outcome::of(Action::backoff()).as_str(), "error");
        assert_eq!(
            Outcome::of(Action::requeue(Duration::ZERO)).as_str(),
            "success"
        );
        assert_eq!(Action::recheck(None), Action::AwaitChange);
    }
}
