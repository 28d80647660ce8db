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

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::alpha::alpha_twin;
    use flotilla_api::core::Scope;
    use flotilla_api::{TYPES_GROUP, V1BETA1};

    fn twin(api: FederatedApi, created: &str) -> Twin<'_> {
        Twin {
            api,
            created: Some(created),
            deleting: false,
        }
    }

    const T1: &str = "2026-01-01T00:00:01Z";
    const T2: &str = "2026-01-01T00:00:02Z";

    #[test]
    fn the_api_of_a_type_is_the_one_its_group_serves() {
        let beta = ApiResource {
            group: TYPES_GROUP.into(),
            version: V1BETA1.into(),
            kind: "FederatedDeployment".into(),
            plural_name: "federateddeployments".into(),
            scope: Scope::Namespaced,
        };
        let alpha = alpha_twin(&beta).expect("twin");
        assert_eq!(FederatedApi::of(&alpha), FederatedApi::V1alpha1);
        assert_eq!(FederatedApi::of(&beta), FederatedApi::V1beta1);
    }

    #[test]
    fn the_older_twin_propagates_and_the_newer_yields() {
        let alpha = twin(FederatedApi::V1alpha1, T1);
        let beta = twin(FederatedApi::V1beta1, T2);
        assert_eq!(role(&alpha, &beta), Role::Propagates);
        assert_eq!(role(&beta, &alpha), Role::Yields);
    }

    #[test]
    fn on_a_tie_v1beta1_propagates() {
        let alpha = twin(FederatedApi::V1alpha1, T1);
        let beta = twin(FederatedApi::V1beta1, T1);
        assert_eq!(role(&beta, &alpha), Role::Propagates);
        assert_eq!(role(&alpha, &beta), Role::Yields);
    }

    #[test]
    fn a_twin_without_a_timestamp_yields() {
        let alpha = Twin {
            created: None,
            ..twin(FederatedApi::V1alpha1, T1)
        };
        assert_eq!(role(&alpha, &twin(FederatedApi::V1beta1, T2)), Role::Yields);
    }

    #[test]
    fn a_twin_being_deleted_keeps_its_role() {
        let alpha = Twin {
            deleting: true,
            ..twin(FederatedApi::V1alpha1, T1)
        };
        let beta = twin(FederatedApi::V1beta1, T2);
        assert_eq!(role(&alpha, &beta), Role::Propagates);
        assert_eq!(role(&beta, &alpha), Role::Yields);
    }

    #[test]
    fn deleting_a_lone_object_cascades() {
        assert_eq!(
            on_delete(&twin(FederatedApi::V1alpha1, T1), None),
            OnDelete::Cascade
        );
    }

    #[test]
    fn deleting_one_twin_while_the_other_stays_releases_the_members() {
        let alpha = Twin {
            deleting: true,
            ..twin(FederatedApi::V1alpha1, T1)
        };
        let beta = twin(FederatedApi::V1beta1, T2);
        assert_eq!(
            on_delete(&alpha, Some(&beta)),
            OnDelete::Release,
            "hand-over"
        );
        let beta_deleting = Twin {
            deleting: true,
            ..beta
        };
        let alpha_stays = twin(FederatedApi::V1alpha1, T1);
        assert_eq!(
            on_delete(&beta_deleting, Some(&alpha_stays)),
            OnDelete::Release
        );
    }

    #[test]
    fn deleting_both_cascades_from_the_propagating_one_only() {
        let alpha = Twin {
            deleting: true,
            ..twin(FederatedApi::V1alpha1, T1)
        };
        let beta = Twin {
            deleting: true,
            ..twin(FederatedApi::V1beta1, T2)
        };
        assert_eq!(on_delete(&alpha, Some(&beta)), OnDelete::Cascade);
        assert_eq!(on_delete(&beta, Some(&alpha)), OnDelete::Release);
    }

    #[test]
    fn the_conflict_message_names_both_apis_and_the_verdict() {
        let alpha = twin(FederatedApi::V1alpha1, T1);
        let beta = twin(FederatedApi::V1beta1, T2);
        let m = conflict_message(&beta, &alpha, "FederatedDeployment", "ns/web");
        assert!(m.contains("types.kubefed.io/v1beta1"), "{m}");
        assert!(m.contains("types.kubefed.k8s.io/v1alpha1"), "{m}");
        assert!(m.contains("propagates nothing"), "{m}");
        let m = conflict_message(&alpha, &beta, "FederatedDeployment", "ns/web");
        assert!(m.contains("is the one propagated"), "{m}");
    }
}
