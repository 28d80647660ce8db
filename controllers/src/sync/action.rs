//! What a reconcile of one federated object returns (the library's one [`Action`]) and how
//! it fails ([`Error`]). The keyed runner turns an action into a requeue (with its per-key
//! backoff for failures); the reconcile metric's `result` label comes from
//! [`ReconcileResult::of`] the same action, so the two never disagree.

pub use flotilla_multicluster::runner::Action;

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

impl ReconcileResult {
    /// The label of a reconcile that returned `action`.
    pub fn of(action: Action) -> Self {
        match action {
            Action::AwaitChange => ReconcileResult::Success,
            Action::Requeue(_) => ReconcileResult::Waiting,
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
    /// Removing a deleted object's rollout revisions failed.
    #[error("removing the rollout revisions failed: {0}")]
    Revisions(#[source] kube::Error),
}

impl Error {
    /// A bounded label for logs and metrics.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Error::Finalizer(_) => "finalizer",
            Error::HostNamespace(_) => "host_namespace",
            Error::Revisions(_) => "revisions",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_result_label_tells_success_waiting_and_failure_apart() {
        let label = |a| ReconcileResult::of(a).as_str();
        assert_eq!(label(Action::AwaitChange), "success");
        assert_eq!(label(Action::Requeue(Duration::from_secs(1))), "waiting");
        assert_eq!(label(Action::Backoff { recheck: None }), "failure");
    }
}
