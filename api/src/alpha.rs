//! kubefed's alpha API, `types.kubefed.k8s.io/v1alpha1` Federated&lt;Kind&gt;, served beside
//! `types.kubefed.io/v1beta1` and reconciled by the same sync controller: the API resource
//! and CRD of a type's alpha twin. Which of two twins (an alpha and a v1beta1 object of one
//! namespace/name/kind) propagates is `flotilla_core::alpha`.
//!
//! The alpha spec is a subset of v1beta1's (template, `placement.clusters[].name`,
//! `placement.clusterSelector`, `overrides[].clusterOverrides[]{path, value}`,
//! `retainReplicas`), so both versions share one schema; what differs is the spelling of
//! override paths, which `flotilla_core::override_path` accepts in both forms.
//!
//! kubefed's alpha cluster registry (`core.kubefed.k8s.io/v1alpha1`) is *not* served: it was
//! a `FederatedCluster` (not `KubeFedCluster`) whose Secret held `token` and `ca.crt`, with
//! no `caBundle`, `disabledTLSValidations` or `proxyURL` — more than a group/version apart
//! from v1beta1, so it would need a converter rather than a second name.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::core::ApiResource;
use crate::crdgen::federated::{TargetType, federated_api_resource, federated_crd_as};
use crate::{TYPES_GROUP, V1BETA1};

/// API group of kubefed's alpha Federated&lt;Kind&gt; types.
pub const ALPHA_TYPES_GROUP: &str = "types.kubefed.k8s.io";
/// Version of kubefed's alpha types.
pub const V1ALPHA1: &str = "v1alpha1";

/// The alpha twin of a `types.kubefed.io/v1beta1` federated type (same kind, plural and
/// scope in `types.kubefed.k8s.io/v1alpha1`); `None` for a type in any other group, which
/// `flotilla enable --federated-group` can choose and which has no alpha twin.
pub fn alpha_twin(federated: &ApiResource) -> Option<ApiResource> {
    (federated.group == TYPES_GROUP && federated.version == V1BETA1).then(|| ApiResource {
        group: ALPHA_TYPES_GROUP.into(),
        version: V1ALPHA1.into(),
        ..federated.clone()
    })
}

/// The alpha CRD of a target type: the v1beta1 schema and printer columns under
/// `types.kubefed.k8s.io/v1alpha1`, without short names (`fdeploy` stays the v1beta1
/// type's; two CRDs claiming one short name make `kubectl` guess).
pub fn alpha_crd(
    target: &TargetType,
    template_schema: Option<serde_json::Value>,
) -> CustomResourceDefinition {
    let beta = federated_api_resource(&target.api);
    let alpha = alpha_twin(&beta).unwrap_or(beta);
    let mut crd = federated_crd_as(target, &alpha, template_schema);
    crd.spec.names.short_names = None;
    annotate(&mut crd);
    crd
}

/// The alpha twin of a generated `types.kubefed.io/v1beta1` Federated&lt;Kind&gt; CRD (as
/// `flotilla enable` builds it, possibly with a custom resource's template schema); `None`
/// for a CRD in any other group.
pub fn as_alpha_crd(beta: &CustomResourceDefinition) -> Option<CustomResourceDefinition> {
    if beta.spec.group != TYPES_GROUP {
        return None;
    }
    let mut crd = beta.clone();
    crd.metadata.name = Some(format!("{}.{ALPHA_TYPES_GROUP}", crd.spec.names.plural));
    crd.spec.group = ALPHA_TYPES_GROUP.into();
    crd.spec.names.short_names = None;
    for v in &mut crd.spec.versions {
        v.name = V1ALPHA1.into();
    }
    annotate(&mut crd);
    Some(crd)
}

/// The value of `api-approved.kubernetes.io` on the alpha CRDs: `*.k8s.io` groups are
/// protected, and an apiextensions v1 CRD there needs the annotation. kubefed's alpha
/// group never went through API review (its CRDs predate the rule), so it is declared
/// unapproved, which the API server accepts and reports as a condition.
pub const ALPHA_API_APPROVAL: &str =
    "unapproved, kubefed's retired alpha API, served by Flotilla so that existing manifests apply";

fn annotate(crd: &mut CustomResourceDefinition) {
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crate::about::API_APPROVED_ANNOTATION.into(),
            ALPHA_API_APPROVAL.into(),
        );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Scope;

    #[test]
    fn the_alpha_twin_of_a_v1beta1_type_differs_only_in_group_and_version() {
        let beta = ApiResource {
            group: TYPES_GROUP.into(),
            version: V1BETA1.into(),
            kind: "FederatedDeployment".into(),
            plural_name: "federateddeployments".into(),
            scope: Scope::Namespaced,
        };
        let alpha = alpha_twin(&beta).expect("twin");
        assert_eq!(
            alpha.qualified_name(),
            "federateddeployments.types.kubefed.k8s.io"
        );
        assert_eq!(
            (alpha.kind.as_str(), alpha.scope),
            ("FederatedDeployment", Scope::Namespaced)
        );
        let other = ApiResource {
            group: "example.com".into(),
            ..beta
        };
        assert_eq!(alpha_twin(&other), None);
    }

    #[test]
    fn the_alpha_crd_is_the_v1beta1_crd_in_the_alpha_group_without_short_names() {
        let target = crate::crdgen::default_target_types()
            .into_iter()
            .find(|t| t.api.kind == "Deployment")
            .expect("deployments");
        let beta = crate::crdgen::federated_crd(&target, None);
        let alpha = alpha_crd(&target, None);
        assert_eq!(
            alpha.metadata.name.as_deref(),
            Some("federateddeployments.types.kubefed.k8s.io")
        );
        assert_eq!(alpha.spec.group, ALPHA_TYPES_GROUP);
        assert_eq!(alpha.spec.versions[0].name, V1ALPHA1);
        assert_eq!(alpha.spec.names.kind, "FederatedDeployment");
        assert_eq!(alpha.spec.names.short_names, None);
        assert_eq!(alpha.spec.versions[0].schema, beta.spec.versions[0].schema);
        assert_eq!(alpha.spec.scope, beta.spec.scope);
        assert_eq!(as_alpha_crd(&beta), Some(alpha.clone()));
        assert_eq!(
            as_alpha_crd(&alpha),
            None,
            "only a v1beta1 CRD has an alpha twin"
        );
    }
}
