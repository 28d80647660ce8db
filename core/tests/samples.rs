//! The manifests in `config/samples/` mean what they say: every federated sample has a
//! valid placement and overrides and yields a desired object per placed cluster, and the
//! typed samples decode into Flotilla's API types. (That the API server accepts them is
//! checked by `tests/tests/crds.rs`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flotilla_api::crdgen::{default_target_types, federated_api_resource};
use flotilla_api::{FederatedSpec, KubeFedClusterSpec, scheduling::ReplicaSchedulingPreference};
use flotilla_core::placement::{self, ClusterInfo};
use flotilla_core::{desired, overrides};
use serde_json::Value;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/samples")
}

/// Every document of every sample file, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut docs = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(samples_dir())
        .expect("config/samples exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("readable sample");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for doc in serde_saphyr::from_multiple::<Value>(&text).expect("valid YAML") {
            docs.push((name.clone(), doc));
        }
    }
    docs
}

fn kinds() -> Vec<String> {
    documents()
        .into_iter()
        .filter_map(|(_, d)| d["kind"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_samples_cover_the_documented_kinds() {
    let kinds = kinds();
    for kind in [
        "FederatedNamespace",
        "FederatedConfigMap",
        "FederatedDeployment",
        "KubeFedCluster",
        "Secret",
        "ReplicaSchedulingPreference",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} sample");
    }
}

#[test]
fn every_federated_sample_places_and_renders_for_two_members() {
    let no_labels = BTreeMap::new();
    let members = [
        ClusterInfo {
            name: "member1",
            labels: &no_labels,
        },
        ClusterInfo {
            name: "member2",
            labels: &no_labels,
        },
    ];
    let mut seen = 0;
    for (file, doc) in documents() {
        let Some(kind) = doc["kind"].as_str() else {
            continue;
        };
        let Some(target) = default_target_types()
            .into_iter()
            .find(|t| federated_api_resource(&t.api).kind == kind)
        else {
            continue;
        };
        seen += 1;
        assert_eq!(doc["apiVersion"], "types.kubefed.io/v1beta1", "{file}");
        let spec: FederatedSpec =
            serde_json::from_value(doc["spec"].clone()).expect("spec decodes");
        let by_cluster = overrides::by_cluster(&spec.overrides).expect("valid overrides");
        let placed = placement::select(&spec.placement, &members).expect("valid placement");
        assert_eq!(placed.len(), 2, "{file}: placed in both members");
        let name = doc["metadata"]["name"].as_str().expect("named");
        let namespace = doc["metadata"]["namespace"].as_str();
        for cluster in &placed {
            let d = desired::compute(
                &target.api,
                name,
                namespace,
                &spec,
                cluster,
                by_cluster.get(cluster).map(Vec::as_slice),
            )
            .unwrap_or_else(|e| panic!("{file} for {cluster}: {e}"));
            assert_eq!(d.object["kind"], target.api.kind.as_str());
            assert_eq!(d.object["metadata"]["labels"]["kubefed.io/managed"], "true");
        }
    }
    assert!(seen >= 3, "found {seen} federated samples");
}

#[test]
fn the_deployment_sample_runs_five_replicas_in_member2() {
    let (_, doc) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "FederatedDeployment")
        .expect("a FederatedDeployment sample");
    let spec: FederatedSpec = serde_json::from_value(doc["spec"].clone()).expect("decodes");
    let target = default_target_types()
        .into_iter()
        .find(|t| t.api.kind == "Deployment")
        .expect("deployments are a default type");
    let ops = overrides::by_cluster(&spec.overrides).expect("valid");
    let replicas = |cluster: &str| {
        desired::compute(
            &target.api,
            "web",
            Some("demo"),
            &spec,
            cluster,
            ops.get(cluster).map(Vec::as_slice),
        )
        .expect("computes")
        .object["spec"]["replicas"]
            .clone()
    };
    assert_eq!(replicas("member1"), 3);
    assert_eq!(replicas("member2"), 5);
    assert_eq!(
        spec.template["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.25"
    );
}

#[test]
fn the_typed_samples_decode_into_flotillas_types() {
    for (file, doc) in documents() {
        match doc["kind"].as_str() {
            Some("KubeFedCluster") => {
                let spec: KubeFedClusterSpec =
                    serde_json::from_value(doc["spec"].clone()).expect("KubeFedCluster spec");
                assert!(spec.api_endpoint.starts_with("https://"), "{file}");
            }
            Some("ReplicaSchedulingPreference") => {
                let rsp: ReplicaSchedulingPreference =
                    serde_json::from_value(doc.clone()).expect("RSP");
                assert_eq!(rsp.spec.target_kind, "FederatedDeployment", "{file}");
            }
            _ => {}
        }
    }
}
