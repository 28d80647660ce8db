//! The reasons a federated object's status gives, as enums: per cluster
//! ([`ClusterReason`], kubefed's `pkg/controller/sync/status` strings) and for the object as
//! a whole ([`AggregateReason`]). One list each, with what retrying does about each reason,
//! so the controller's backoff, its metrics and the CLI's verdict can never disagree.

use std::{fmt, str::FromStr};

/// What happens to a cluster that reports a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A transient failure: the controller retries with backoff.
    Backoff,
    /// Waiting for something that announces itself (a cluster returning, a member object
    /// going away): a watch event brings the object back, no backoff needed.
    Event,
    /// Retrying cannot fix it: the federated object, an override or a member object has
    /// to change first.
    UserAction,
}

macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $retry:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every reason, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The reason as written in status (kubefed's string).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }

            /// What retrying does about this reason.
            pub const fn retry(self) -> Retry {
                match self {
                    $($name::$variant => Retry::$retry,)+
                }
            }
        }
    };
}

reasons! {
    /// Why a federated object is not (yet) propagated to one cluster.
    ClusterReason {
        /// Being deleted from a cluster (no longer placed there, or recreated).
        WaitingForRemoval => Backoff,
        /// Placed in a cluster that is not Ready, or not registered.
        ClusterNotReady => Event,
        /// The cached member object could not be read.
        CachedRetrievalFailed => Backoff,
        /// The desired object could not be computed from the template.
        ComputeResourceFailed => UserAction,
        /// The overrides for the cluster could not be applied.
        ApplyOverridesFailed => UserAction,
        /// Creating the member object failed.
        CreationFailed => Backoff,
        /// Updating the member object failed.
        UpdateFailed => Backoff,
        /// Deleting the member object failed.
        DeletionFailed => Backoff,
        /// Removing the managed label failed.
        LabelRemovalFailed => Backoff,
        /// Reading the member object failed.
        RetrievalFailed => Backoff,
        /// An unmanaged object exists and adoption is disabled.
        AlreadyExists => UserAction,
        /// Fields could not be retained from the member object.
        FieldRetentionFailed => UserAction,
        /// The recorded version could not be read.
        VersionRetrievalFailed => Backoff,
        /// No client for the cluster.
        ClientRetrievalFailed => Backoff,
        /// The member object is labelled `kubefed.io/managed=false`.
        ManagedLabelFalse => UserAction,
        /// Creation did not finish in time.
        CreationTimedOut => Backoff,
        /// Update did not finish in time.
        UpdateTimedOut => Backoff,
        /// Deletion did not finish in time.
        DeletionTimedOut => Backoff,
        /// Label removal did not finish in time.
        LabelRemovalTimedOut => Backoff,
        /// Flotilla: another writer changed the member object and the drift policy is
        /// `Report`: the change is left in place (see `status.drift`).
        Drifted => UserAction,
        /// Flotilla: another writer kept undoing the repairs of a field; Flotilla stopped
        /// repairing it (see `status.drift`).
        DriftFight => UserAction,
    }
}

reasons! {
    /// Why a federated object as a whole is not propagated (the Propagation condition's reason).
    AggregateReason {
        /// The cluster list could not be read.
        ClusterRetrievalFailed => Backoff,
        /// Placement could not be computed (e.g. a malformed selector or spec).
        ComputePlacementFailed => UserAction,
        /// At least one cluster did not propagate: see `status.clusters`.
        CheckClusters => Event,
        /// The namespace of the object is not federated.
        NamespaceNotFederated => UserAction,
        /// Flotilla: the object exists both in kubefed's alpha `types.kubefed.k8s.io/v1alpha1`
        /// and in `types.kubefed.io/v1beta1`; only the older one propagates (see
        /// [`crate::alpha`]).
        VersionConflict => UserAction,
    }
}

impl ClusterReason {
    /// Whether the controller retries this reason with backoff (kubefed's recoverable set).
    pub const fn is_recoverable(self) -> bool {
        matches!(self.retry(), Retry::Backoff)
    }

    /// Whether only a change by the user can clear this reason.
    pub const fn is_terminal(self) -> bool {
        matches!(self.retry(), Retry::UserAction)
    }
}

/// A reason string that is not one of the enum's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason {0:?}")]
pub struct UnknownReason(pub String);

macro_rules! string_impls {
    ($($name:ident),+) => {$(
        impl FromStr for $name {
            type Err = UnknownReason;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|r| r.as_str() == s)
                    .ok_or_else(|| UnknownReason(s.to_owned()))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

string_impls!(ClusterReason, AggregateReason);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_reason_round_trips_through_its_string() {
        for r in ClusterReason::ALL {
            assert_eq!(r.as_str().parse::<ClusterReason>(), Ok(*r));
        }
        for r in AggregateReason::ALL {
            assert_eq!(r.as_str().parse::<AggregateReason>(), Ok(*r));
        }
    }

    #[test]
    fn reasons_are_kubefeds_strings() {
        assert_eq!(
            ClusterReason::WaitingForRemoval.as_str(),
            "WaitingForRemoval"
        );
        assert_eq!(
            ClusterReason::ManagedLabelFalse.as_str(),
            "ManagedLabelFalse"
        );
        assert_eq!(AggregateReason::CheckClusters.as_str(), "CheckClusters");
    }

    #[test]
    fn an_unknown_reason_is_an_error_naming_it() {
        let e = "Sideways".parse::<ClusterReason>().expect_err("unknown");
        assert!(e.to_string().contains("Sideways"));
    }

    #[test]
    fn user_errors_are_terminal_and_transient_failures_recoverable() {
        assert!(ClusterReason::ApplyOverridesFailed.is_terminal());
        assert!(ClusterReason::AlreadyExists.is_terminal());
        assert!(!ClusterReason::ApplyOverridesFailed.is_recoverable());
        assert!(ClusterReason::CreationFailed.is_recoverable());
        assert!(ClusterReason::DeletionTimedOut.is_recoverable());
        // A cluster that is down comes back through its Ready event, not a retry loop.
        assert!(!ClusterReason::ClusterNotReady.is_recoverable());
        assert!(!ClusterReason::ClusterNotReady.is_terminal());
    }
}
