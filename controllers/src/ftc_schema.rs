//! A check of the Federated&lt;Kind&gt; CRD a type config uses. kubefed's own CRDs declare
//! `status.clusters[]` with only `name`, `status` and `remoteStatus`, and conditions without
//! a `message`, so the API server prunes Flotilla's per-cluster messages (the member's own
//! words behind `CreationFailed`, say) and users see a bare reason; nor do they declare
//! `status.aggregated` of workload types, nor `status.drift`. Flotilla's CRDs
//! (`config/crds`, `flotilla enable`) keep them. The controller has no right to change
//! CRDs, so it says so once per start of the type, in the log and as an Event, and the
//! sync controller leaves those fields out of the status it compares and writes
//! ([`Pruned::strip`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::{Api, Client, Resource, runtime::events::EventType};
use tracing::{debug, warn};

use flotilla_api::{
    FederatedTypeConfig,
    core::{ApiResource, StatusCollectionMode},
    federated::FederatedStatus,
    workload::WorkloadKind,
};

/// Fields of Flotilla's status that a CRD's schema does not declare (and the API server
/// therefore drops), for the given version: the messages, and `status.aggregated` when
/// `aggregated` says the type writes it. Empty when the schema keeps them, or when the
/// version has no schema or preserves unknown fields.
pub fn pruned_status_fields(
    crd: &CustomResourceDefinition,
    version: &str,
    aggregated: bool,
) -> Vec<&'static str> {
    let Some(schema) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
    else {
        return Vec::new();
    };
    let Some(status) = property(schema, "status") else {
        return Vec::new();
    };
    let mut missing = Vec::new();
    for (list, field) in [
        ("clusters", "status.clusters[].message"),
        ("conditions", "status.conditions[].message"),
    ] {
        let item = property(status, list).and_then(|l| l.items.as_ref());
        let item = match item {
            Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(s)) => Some(&**s),
            _ => None,
        };
        if item.is_some_and(|i| !keeps(i, "message")) {
            missing.push(field);
        }
    }
    if !keeps(status, "drift") {
        missing.push("status.drift");
    }
    if aggregated && !keeps(status, "aggregated") {
        missing.push("status.aggregated");
    }
    missing
}

fn property<'a>(schema: &'a JSONSchemaProps, name: &str) -> Option<&'a JSONSchemaProps> {
    schema.properties.as_ref()?.get(name)
}

/// Whether an object schema keeps `field`: declared, or unknown fields preserved.
fn keeps(schema: &JSONSchemaProps, field: &str) -> bool {
    schema.x_kubernetes_preserve_unknown_fields == Some(true) || property(schema, field).is_some()
}

/// Reads the federated type's CRD and warns (log and Event on the type config) when it
/// would prune Flotilla's status messages. Best effort: a CRD that cannot be read is only
/// logged at debug level.
pub async fn check(host: &Client, ftc: &FederatedTypeConfig) -> Pruned {
    let fed: &ApiResource = &ftc.spec.federated_type;
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    let crd = match crds.get(&fed.qualified_name()).await {
        Ok(crd) => crd,
        Err(e) => {
            debug!(crd = %fed.qualified_name(), error = %e, "reading the federated CRD failed");
            return Pruned::default();
        }
    };
    let aggregated = ftc.spec.status_collection == Some(StatusCollectionMode::Enabled)
        && WorkloadKind::of(&ftc.spec.target_type).is_some();
    let missing = pruned_status_fields(&crd, &fed.version, aggregated);
    let pruned = Pruned::from_missing(&missing);
    if !missing.is_empty() {
        warn_pruning(host, ftc, &missing).await;
    }
    pruned
}

/// What a CRD's schema drops from the status Flotilla writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `status.clusters[].message`.
    pub cluster_messages: bool,
    /// `status.conditions[].message`.
    pub condition_messages: bool,
    /// `status.aggregated`.
    pub aggregated: bool,
    /// `status.drift`.
    pub drift: bool,
}

impl Pruned {
    /// From the field names [`pruned_status_fields`] returns.
    pub fn from_missing(missing: &[&str]) -> Self {
        Pruned {
            cluster_messages: missing.contains(&"status.clusters[].message"),
            condition_messages: missing.contains(&"status.conditions[].message"),
            aggregated: missing.contains(&"status.aggregated"),
            drift: missing.contains(&"status.drift"),
        }
    }

    /// The status as the API server will store it. Compared with the stored status, the
    /// status Flotilla builds must leave out what the schema drops: otherwise they always
    /// differ, every reconcile writes, and every write is a watch event that reconciles
    /// again.
    pub fn strip(&self, status: &mut FederatedStatus) {
        if self.cluster_messages {
            for c in &mut status.clusters {
                c.message.clear();
            }
        }
        if self.condition_messages {
            for c in &mut status.conditions {
                c.message.clear();
            }
        }
        if self.aggregated {
            status.aggregated = None;
        }
        if self.drift {
            status.drift.clear();
        }
    }
}

/// Says once, in the log and as an Event on the type config, which fields are dropped.
async fn warn_pruning(host: &Client, ftc: &FederatedTypeConfig, missing: &[&str]) {
    let fed: &ApiResource = &ftc.spec.federated_type;
    let note = format!(
        "the CRD {} does not declare {}: the API server drops those fields from status (kubefed's CRD); apply Flotilla's CRD (flotilla enable, or config/crds) to keep them",
        fed.qualified_name(),
        missing.join(" and ")
    );
    warn!(crd = %fed.qualified_name(), "{note}");
    let recorder = crate::events::recorder(host.clone(), "flotilla-ftc");
    let reference = ftc.object_ref(&());
    crate::events::publish(
        &recorder,
        &reference,
        EventType::Warning,
        "StatusMessagesPruned",
        "CheckSchema",
        note,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(status: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "federatedconfigmaps.types.kubefed.io"},
            "spec": {
                "group": "types.kubefed.io", "scope": "Namespaced",
                "names": {"kind": "FederatedConfigMap", "plural": "federatedconfigmaps"},
                "versions": [{"name": "v1beta1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"status": status}}}}]
            }
        }))
        .expect("a CRD")
    }

    #[test]
    fn kubefeds_status_schema_prunes_both_messages() {
        let kubefed = crd(json!({"type": "object", "properties": {
            "clusters": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "status": {"type": "string"},
                "remoteStatus": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
            "conditions": {"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"}}}}
        }}));
        assert_eq!(
            pruned_status_fields(&kubefed, "v1beta1", false),
            vec![
                "status.clusters[].message",
                "status.conditions[].message",
                "status.drift"
            ]
        );
        assert_eq!(
            pruned_status_fields(&kubefed, "v1beta1", true).last(),
            Some(&"status.aggregated")
        );
    }

    #[test]
    fn flotillas_generated_crds_keep_every_message() {
        for crd in flotilla_api::crdgen::all_crds()
            .into_iter()
            .filter(|c| c.spec.group == flotilla_api::TYPES_GROUP)
        {
            assert!(
                pruned_status_fields(&crd, "v1beta1", true).is_empty(),
                "{:?}",
                crd.metadata.name
            );
        }
    }

    #[test]
    fn an_unknown_version_or_a_schema_without_status_is_not_reported() {
        let c = crd(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        assert!(pruned_status_fields(&c, "v1beta1", true).is_empty());
        assert!(pruned_status_fields(&c, "v2", true).is_empty());
    }

    #[test]
    fn a_status_is_compared_as_the_schema_stores_it() {
        let mut status = FederatedStatus {
            clusters: vec![flotilla_api::federated::ClusterStatus {
                name: "m1".into(),
                status: "CreationFailed".into(),
                message: "denied".into(),
                remote_status: None,
            }],
            ..FederatedStatus::default()
        };
        let kubefeds = Pruned::from_missing(&["status.clusters[].message"]);
        assert!(kubefeds.cluster_messages && !kubefeds.aggregated);
        let mut untouched = status.clone();
        Pruned::default().strip(&mut untouched);
        assert_eq!(untouched, status);
        kubefeds.strip(&mut status);
        assert_eq!(status.clusters[0].message, "");
        assert_eq!(status.clusters[0].status, "CreationFailed");
        // Without `status.drift` in the schema, the drift entries are not compared either.
        let mut drifted = FederatedStatus {
            drift: vec![flotilla_api::drift::ClusterDrift::default()],
            ..FederatedStatus::default()
        };
        Pruned::from_missing(&["status.drift"]).strip(&mut drifted);
        assert!(drifted.drift.is_empty());
    }
}
