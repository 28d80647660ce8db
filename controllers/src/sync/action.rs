//! What a reconcile of one federated object returns ([`Action`]) and how it fails
//! ([`Error`]). The work queue turns an action into a requeue (with its per-key backoff for
//! failures); the reconcile metric's `result` label comes from [`Action::result`], so the
//! two never disagree.

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
