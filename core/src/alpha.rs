//! Twins: an object of kubefed's alpha API (`types.kubefed.k8s.io/v1alpha1`) and a
//! `types.kubefed.io/v1beta1` one of the same namespace/name/kind, both reconciled by the
//! same sync controller. Which of the two propagates, what deleting one does to the member
//! objects, and the condition message that names the other. The alpha API's group, version
//! and CRDs are `flotilla_api::alpha`.

use std::cmp::Ordering;

use flotilla_api::alpha::ALPHA_TYPES_GROUP;
use flotilla_api::core::ApiResource;

/// Which API a federated object is served by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FederatedApi {
    /// `types.kubefed.io/v1beta1` (sorted first: it wins a tie).
    V1beta1,
    /// `types.kubefed.k8s.io/v1alpha1`.
    V1alpha1,
}

impl FederatedApi {
    /// The group/version, as written in `apiVersion`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FederatedApi::V1beta1 => "types.kubefed.io/v1beta1",
            FederatedApi::V1alpha1 => "types.kubefed.k8s.io/v1alpha1",
        }
    }

    /// The API of a federated type's group.
    pub fn of(federated: &ApiResource) -> Self {
        if federated.group == ALPHA_TYPES_GROUP {
            FederatedApi::V1alpha1
        } else {
            FederatedApi::V1beta1
        }
    }
}

/// One of two twins, as the decision sees it. `created` is the RFC 3339
/// `creationTimestamp` (second resolution; equal strings are a tie).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Twin<'a> {
    /// Which API serves it.
    pub api: FederatedApi,
    /// Its `metadata.creationTimestamp`; `None` sorts last.
    pub created: Option<&'a str>,
    /// Whether it has a `deletionTimestamp`.
    pub deleting: bool,
}

/// What one twin does while the other exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It propagates (and reports the conflict).
    Propagates,
    /// It propagates nothing and reports the conflict.
    Yields,
}

/// The older twin propagates — the one whose member objects already exist — so creating a
/// second never disturbs running workloads; on a tie (one second), v1beta1. A twin being
/// deleted keeps its role until it is gone, so the survivor never writes members the
/// deletion is still removing.
pub fn role(own: &Twin<'_>, other: &Twin<'_>) -> Role {
    fn age<'a>(t: &Twin<'a>) -> (bool, Option<&'a str>, FederatedApi) {
        (t.created.is_none(), t.created, t.api)
    }
    match age(own).cmp(&age(other)) {
        Ordering::Less | Ordering::Equal => Role::Propagates,
        Ordering::Greater => Role::Yields,
    }
}

/// What deleting a federated object does to the member objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDelete {
    /// kubefed's deletion: member objects are deleted (or orphaned), then the finalizer goes.
    Cascade,
    /// Only the finalizer goes: the member objects stay for the twin, which propagates
    /// from then on (a twin that yielded never owned them; a propagating one hands them over).
    Release,
}

/// Deleting one twin while the other stays hands the member objects over — so migrating
/// from alpha is "apply the v1beta1 object, delete the alpha one", without a gap; only when
/// both are deleted does the propagating one cascade.
pub fn on_delete(own: &Twin<'_>, other: Option<&Twin<'_>>) -> OnDelete {
    match other {
        None => OnDelete::Cascade,
        Some(other) if !other.deleting => OnDelete::Release,
        Some(other) => match role(own, other) {
            Role::Propagates => OnDelete::Cascade,
            Role::Yields => OnDelete::Release,
        },
    }
}

/// The condition message of a twin, naming the other.
pub fn conflict_message(own: &Twin<'_>, other: &Twin<'_>, kind: &str, key: &str) -> String {
    let verdict = match role(own, other) {
        Role::Propagates => "this object is older and is the one propagated",
        Role::Yields => {
            "that object is older and is the one propagated; this one propagates nothing"
        }
    };
    format!(
        "{kind} {key} exists as both {} and {}: {verdict}. Delete one of them (deleting one hands the member objects to the other)",
        own.api.as_str(),
        other.api.as_str()
    )
}
