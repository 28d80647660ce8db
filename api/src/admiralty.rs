//! Admiralty's multicluster-service-account API, `multicluster.admiralty.io/v1alpha1`
//! ServiceAccountImport, served beside Flotilla's `multicluster.flotilla.io` one by the
//! same controller and webhook: one spec and status type, two groups ([`ImportGroup`]).
//!
//! Admiralty's spec (`clusterName`, `namespace`, `name`) is a subset of Flotilla's, so
//! Admiralty manifests apply unchanged; Admiralty's auto-mount conventions — the namespace
//! label `multicluster-service-account: enabled`, the Pod annotation
//! `multicluster.admiralty.io/service-account-import.name: a,b` and the mount root
//! `/var/run/secrets/admiralty.io/serviceaccountimports/<name>` — are constants here.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::multicluster::{
    MULTICLUSTER_GROUP, ServiceAccountImport, ServiceAccountImportSpec, ServiceAccountImportStatus,
};

/// Admiralty's API group.
pub const ADMIRALTY_GROUP: &str = "multicluster.admiralty.io";
/// Admiralty's namespace label turning auto-mount on (value [`ADMIRALTY_NAMESPACE_VALUE`]).
pub const ADMIRALTY_NAMESPACE_LABEL: &str = "multicluster-service-account";
/// The value of [`ADMIRALTY_NAMESPACE_LABEL`] that turns auto-mount on.
pub const ADMIRALTY_NAMESPACE_VALUE: &str = "enabled";
/// Admiralty's Pod annotation naming the imports to mount, comma-separated.
pub const ADMIRALTY_IMPORTS_ANNOTATION: &str =
    "multicluster.admiralty.io/service-account-import.name";
/// Where Admiralty mounts each import's Secret; `/<name>` is appended.
pub const ADMIRALTY_MOUNT_ROOT: &str = "/var/run/secrets/admiralty.io/serviceaccountimports";

/// A ServiceAccountImport of either group, read and written through the group's API
/// resource ([`ImportGroup::api_resource`]).
pub type AnyImport = kube::core::Object<ServiceAccountImportSpec, ServiceAccountImportStatus>;

/// Which group an import belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImportGroup {
    /// `multicluster.flotilla.io/v1alpha1`.
    Flotilla,
    /// `multicluster.admiralty.io/v1alpha1`.
    Admiralty,
}

impl ImportGroup {
    /// Both groups.
    pub const ALL: [ImportGroup; 2] = [ImportGroup::Flotilla, ImportGroup::Admiralty];

    /// The group's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ImportGroup::Flotilla => MULTICLUSTER_GROUP,
            ImportGroup::Admiralty => ADMIRALTY_GROUP,
        }
    }

    /// The ServiceAccountImport resource of the group.
    pub fn api_resource(self) -> kube::core::ApiResource {
        let gvk =
            kube::core::GroupVersionKind::gvk(self.as_str(), "v1alpha1", "ServiceAccountImport");
        kube::core::ApiResource::from_gvk_with_plural(&gvk, "serviceaccountimports")
    }
}

/// Admiralty's ServiceAccountImport CRD: Flotilla's schema (Admiralty's fields plus the
/// optional `expirationSeconds`) and columns, in Admiralty's group with its short name `sai`.
pub fn admiralty_crd() -> CustomResourceDefinition {
    let mut crd = ServiceAccountImport::crd();
    crd.metadata.name = Some(format!("serviceaccountimports.{ADMIRALTY_GROUP}"));
    crd.spec.group = ADMIRALTY_GROUP.into();
    crd.spec.names.short_names = Some(vec!["sai".into()]);
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admiralty_crd_is_flotillas_in_admiraltys_group() {
        let crd = admiralty_crd();
        let flotilla = ServiceAccountImport::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("serviceaccountimports.multicluster.admiralty.io")
        );
        assert_eq!(crd.spec.names.kind, "ServiceAccountImport");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        assert_eq!(
            crd.spec.versions[0].schema,
            flotilla.spec.versions[0].schema
        );
        assert_eq!(crd.spec.names.short_names, Some(vec!["sai".to_string()]));
    }

    #[test]
    fn admiraltys_manifest_reads_as_an_import() {
        let import: AnyImport = serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.admiralty.io/v1alpha1",
            "kind": "ServiceAccountImport",
            "metadata": {"name": "foo-controller-remote-cluster1", "namespace": "foo"},
            "spec": {"clusterName": "cluster1", "namespace": "foo", "name": "foo-controller-remote"}
        }))
        .expect("Admiralty's manifest");
        assert_eq!(import.spec.cluster_name, "cluster1");
        assert_eq!(import.spec.lifetime_seconds(), 3600);
    }

    #[test]
    fn each_group_has_its_api_resource() {
        let a = ImportGroup::Admiralty.api_resource();
        assert_eq!(a.api_version, "multicluster.admiralty.io/v1alpha1");
        assert_eq!(
            (a.kind.as_str(), a.plural.as_str()),
            ("ServiceAccountImport", "serviceaccountimports")
        );
        assert_eq!(
            ImportGroup::Flotilla.api_resource().group,
            "multicluster.flotilla.io"
        );
    }
}
