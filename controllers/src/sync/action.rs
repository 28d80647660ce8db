//! What a reconcile of one federated object returns ([`Action`]), how it fails ([`Error`]),
//! and the per-key backoff that turns repeated failures into growing delays. The reconcile
//! metric's `result` label comes from [`Action::result`], so the two never disagree.

use std::{collections::HashMap, hash::Hash, sync::Mutex, time::Duration};

/// What the work queue does with a key after its reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// In the desired state (or failed for a reason only the user can fix): wait for the
    /// next change.
    Done,
    /// Waiting on something without an event of its own (a cache still listing, a member
    /// object being removed, a deadline): look again after this long.
    RequeueAfter(Duration),
    /// Something failed that retrying may fix: retry with the key's growing backoff, or
    /// at `recheck` if that is sooner.
    Backoff {
        /// An earlier time to look again regardless of the backoff.
        recheck: Option<Duration>,
    },
}

/// The reconcile metric's `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Reconciled; nothing pending.
    Success,
    /// Waiting for a cache, a cluster or a removal.
    Waiting,
    /// Failed; retried with backoff.
    Failure,
}

impl ReconcileResult {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Waiting => "waiting",
            ReconcileResult::Failure => "failure",
        }
    }
}

impl Action {
    /// The action when nothing failed: done, or a recheck when one is due.
    pub fn recheck(after: Option<Duration>) -> Action {
        after.map_or(Action::Done, Action::RequeueAfter)
    }

    /// The metric label of this action.
    pub fn result(self) -> ReconcileResult {
        match self {
            Action::Done => ReconcileResult::Success,
            Action::RequeueAfter(_) => ReconcileResult::Waiting,
            Action::Backoff { .. } => ReconcileResult::Failure,
        }
    }
}

/// A reconcile that could not finish because the host refused or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Adding or removing the sync finalizer failed.
    #[error("updating the sync finalizer failed: {0}")]
    Finalizer(#[source] kube::Error),
    /// Reading the host namespace (is a member namespace the host's own?) failed.
    #[error("reading the host namespace failed: {0}")]
    HostNamespace(#[source] kube::Error),
}

impl Error {
    /// A bounded label for logs and metrics.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Error::Finalizer(_) => "finalizer",
            Error::HostNamespace(_) => "host_namespace",
        }
    }
}

/// First backoff delay; it doubles per consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest backoff delay.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Consecutive failures per key.
pub struct Backoff<K> {
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash + Clone> Default for Backoff<K> {
    fn default() -> Self {
        Backoff {
            failures: Mutex::default(),
        }
    }
}

impl<K: Eq + Hash + Clone> Backoff<K> {
    /// The delay before the next attempt of `key` after its reconcile returned `action`
    /// (`None`: wait for an event). A failure grows the key's backoff; anything else resets it.
    pub fn next(&self, key: &K, action: Action) -> Option<Duration> {
        // A map of counters stays valid after a panic in a holder.
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match action {
            Action::Done => {
                failures.remove(key);
                None
            }
            Action::RequeueAfter(d) => {
                failures.remove(key);
                Some(d)
            }
            Action::Backoff { recheck } => {
                let n = failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                let delay = delay_after(*n);
                Some(recheck.map_or(delay, |r| r.min(delay)))
            }
        }
    }
}

/// The backoff delay after `failures` consecutive failures: 1 s, 2 s, 4 s … at most 60 s.
pub fn delay_after(failures: u32) -> Duration {
    BACKOFF_BASE
        .saturating_mul(1 << failures.min(7))
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_failures_back_off_longer_up_to_a_minute() {
        assert_eq!(delay_after(1), Duration::from_secs(1));
        assert_eq!(delay_after(2), Duration::from_secs(2));
        assert_eq!(delay_after(30), Duration::from_secs(60));
    }

    #[test]
    fn a_success_resets_the_backoff() {
        let b = Backoff::default();
        let fail = Action::Backoff { recheck: None };
        assert_eq!(b.next(&"k", fail), Some(Duration::from_secs(1)));
        assert_eq!(b.next(&"k", fail), Some(Duration::from_secs(2)));
        assert_eq!(b.next(&"k", Action::Done), None);
        assert_eq!(b.next(&"k", fail), Some(Duration::from_secs(1)));
    }

    #[test]
    fn an_earlier_recheck_wins_over_the_backoff() {
        let b = Backoff::default();
        let action = Action::Backoff {
            recheck: Some(Duration::from_millis(200)),
        };
        assert_eq!(b.next(&"k", action), Some(Duration::from_millis(200)));
    }

    #[test]
    fn the_result_label_tells_success_waiting_and_failure_apart() {
        assert_eq!(Action::Done.result().as_str(), "success");
        assert_eq!(
            Action::RequeueAfter(Duration::from_secs(1))
                .result()
                .as_str(),
            "waiting"
        );
        assert_eq!(
            Action::Backoff { recheck: None }.result().as_str(),
            "failure"
        );
    }
}
