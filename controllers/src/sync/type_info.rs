//! What one sync controller propagates: the federated and target APIs, the target's scope,
//! status collection, the workload kind and the federated schema's status pruning — and
//! the names and references that follow from them alone. Pure: no cache, no client call.

use flotilla_api::{
    DEFAULT_NAMESPACE,
    core::{FederatedTypeConfigSpec, Scope, StatusCollectionMode},
    work::work_name,
};
use flotilla_core::{alpha::FederatedApi, health::TypeHealth};
use k8s_openapi::{
    api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::{ApiResource, DynamicObject},
};

use super::{Key, plan::PROTECTED_NAMESPACES};
use crate::{ftc_schema::Pruned, metrics::TypeLabels};

/// One federated type as its sync controller propagates it.
pub(super) struct TypeInfo {
    /// The Federated&lt;Kind&gt; API reconciled.
    pub fed_ar: ApiResource,
    /// The member objects' API.
    pub target_ar: ApiResource,
    pub target_namespaced: bool,
    /// The target is `v1/Namespace` (a FederatedNamespace).
    pub is_namespace_type: bool,
    /// Namespaced objects are placed only where their namespace is (FederatedNamespace).
    pub needs_ns_placement: bool,
    /// Copy each member object's `status` into `status.clusters[].remoteStatus`
    /// (the FTC's `statusCollection: Enabled`).
    pub collect_status: bool,
    /// The health rules that gate rollouts and sum `status.aggregated`: set when status is
    /// collected and the type has rules (its FTC's `spec.health`, or a workload kind's
    /// built-in ones).
    pub health: Option<std::sync::Arc<TypeHealth>>,
    /// What the federated CRD's schema drops from status.
    pub pruned: Pruned,
}

impl TypeInfo {
    /// The type `ftc` configures, reconciled through `fed_ar`.
    pub fn of(ftc: &FederatedTypeConfigSpec, fed_ar: ApiResource, pruned: Pruned) -> Self {
        let target_namespaced = ftc.target_type.namespaced();
        let is_namespace_type =
            ftc.target_type.group.is_empty() && ftc.target_type.kind == "Namespace";
        let collect_status = ftc.status_collection == Some(StatusCollectionMode::Enabled);
        TypeInfo {
            fed_ar,
            target_ar: ftc.target_type.to_kube(),
            target_namespaced,
            is_namespace_type,
            needs_ns_placement: target_namespaced && !is_namespace_type,
            collect_status,
            health: Some(TypeHealth::of(&ftc.target_type, ftc.health.as_ref()))
                .filter(|h| collect_status && (h.has_rules() || h.invalid().is_some())),
            pruned,
        }
    }

    pub fn kind_labels(&self) -> TypeLabels {
        TypeLabels {
            kind: self.fed_ar.kind.clone(),
        }
    }

    /// Name and namespace of the member object for a federated key.
    pub fn member_name<'a>(&self, key: &'a Key) -> (Option<&'a str>, &'a str) {
        if self.target_namespaced && !self.is_namespace_type {
            (key.0.as_deref(), key.1.as_str())
        } else {
            (None, key.1.as_str())
        }
    }

    /// The federated key of a member object (a namespace's key is `(name, name)`).
    pub fn key_of_member(&self, namespace: Option<String>, name: String) -> Key {
        if self.is_namespace_type {
            (Some(name.clone()), name)
        } else {
            (namespace, name)
        }
    }

    pub fn member_api(&self, client: Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.target_ar),
            None => Api::all_with(client, &self.target_ar),
        }
    }

    pub fn host_api(&self, host: Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(host, ns, &self.fed_ar),
            None => Api::all_with(host, &self.fed_ar),
        }
    }

    pub fn target_type_api(&self) -> flotilla_api::core::ApiResource {
        flotilla_api::core::ApiResource {
            group: self.target_ar.group.clone(),
            version: self.target_ar.version.clone(),
            kind: self.target_ar.kind.clone(),
            plural_name: self.target_ar.plural.clone(),
            scope: if self.target_namespaced {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
        }
    }

    /// Namespaces that are only ever unlabelled in members, never deleted;
    /// `control_plane`: Flotilla's own namespace.
    pub fn is_protected(&self, key: &Key, control_plane: &str) -> bool {
        self.is_namespace_type
            && (PROTECTED_NAMESPACES.contains(&key.1.as_str())
                || key.1 == control_plane
                || key.1 == DEFAULT_NAMESPACE)
    }

    /// The federated API this controller serves (kubefed's alpha or v1beta1).
    pub fn api(&self) -> FederatedApi {
        FederatedApi::of(&flotilla_api::core::ApiResource {
            group: self.fed_ar.group.clone(),
            version: self.fed_ar.version.clone(),
            kind: self.fed_ar.kind.clone(),
            plural_name: self.fed_ar.plural.clone(),
            scope: Scope::Namespaced,
        })
    }

    /// The twin's API.
    pub fn other_api(&self) -> FederatedApi {
        match self.api() {
            FederatedApi::V1beta1 => FederatedApi::V1alpha1,
            FederatedApi::V1alpha1 => FederatedApi::V1beta1,
        }
    }

    /// Whether member objects are Secrets (values never shown).
    pub fn is_secret(&self) -> bool {
        flotilla_core::redact::is_secret_type(&self.target_ar.group, &self.target_ar.kind)
    }

    /// The name of the Work rendering `key` in a Pull cluster's namespace.
    pub fn work_name(&self, key: &Key) -> String {
        work_name(
            &self.target_ar.plural,
            &self.target_ar.group,
            key.0.as_deref(),
            &key.1,
        )
    }

    /// The federated object, as the subject of an Event.
    pub fn object_ref(&self, fed: &DynamicObject) -> ObjectReference {
        fed.object_ref(&self.fed_ar)
    }

    /// The federated object as the controlling owner of what is stored for it.
    pub fn owner(&self, fed: &DynamicObject) -> OwnerReference {
        OwnerReference {
            api_version: DynamicObject::api_version(&self.fed_ar).to_string(),
            kind: self.fed_ar.kind.clone(),
            name: fed.name_any(),
            uid: fed.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

/// A type for unit tests: `kind` of `group`, its v1beta1 federated type, nothing pruned.
#[cfg(test)]
pub(super) fn info(group: &str, kind: &str, scope: Scope) -> TypeInfo {
    let target = flotilla_api::core::ApiResource {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural_name: format!("{}s", kind.to_lowercase()),
        scope,
    };
    let fed_type = flotilla_api::crdgen::federated_api_resource(&target);
    let ftc = FederatedTypeConfigSpec {
        target_type: target,
        propagation: flotilla_api::core::PropagationMode::Enabled,
        federated_type: fed_type.clone(),
        status_type: None,
        status_collection: None,
        health: None,
    };
    TypeInfo::of(&ftc, fed_type.to_kube(), Pruned::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaced_object_keeps_its_namespace_and_a_namespace_is_named_alone() {
        let key: Key = (Some("demo".into()), "web".into());
        let deployment = info("apps", "Deployment", Scope::Namespaced);
        assert!(deployment.needs_ns_placement);
        assert_eq!(deployment.member_name(&key), (Some("demo"), "web"));
        assert_eq!(
            deployment.key_of_member(Some("demo".into()), "web".into()),
            key
        );
        let namespace = info("", "Namespace", Scope::Cluster);
        assert!(namespace.is_namespace_type && !namespace.needs_ns_placement);
        let ns_key: Key = (Some("demo".into()), "demo".into());
        assert_eq!(namespace.member_name(&ns_key), (None, "demo"));
        assert_eq!(namespace.key_of_member(None, "demo".into()), ns_key);
    }

    #[test]
    fn only_system_default_and_control_plane_namespaces_are_protected() {
        let namespace = info("", "Namespace", Scope::Cluster);
        let key = |n: &str| (Some(n.to_string()), n.to_string());
        assert!(namespace.is_protected(&key("kube-system"), "flotilla-system"));
        assert!(namespace.is_protected(&key("default"), "flotilla-system"));
        assert!(namespace.is_protected(&key("flotilla-system"), "flotilla-system"));
        assert!(!namespace.is_protected(&key("demo"), "flotilla-system"));
        let config_map = info("", "ConfigMap", Scope::Namespaced);
        assert!(!config_map.is_protected(&key("kube-system"), "flotilla-system"));
    }
}
