//! The capacity side of `flotilla status`: `--clusters` lists each member's resource
//! summary (KubeFedCluster `status.resources`, kept from watches by the control plane), and
//! `flotilla status rsp[/NAME]` shows each ReplicaSchedulingPreference's last division per
//! cluster with its reason (the RSP's `status.clusters`, written by the scheduler that
//! divided). Reading is thin I/O; the tables are pure.

use std::fmt::Write as _;

use flotilla_api::{KubeFedCluster, ReplicaSchedulingPreference, scheduling::ClusterDivision};
use kube::{Api, Client, ResourceExt, api::ListParams};

/// Whether `type_name` names ReplicaSchedulingPreferences.
pub fn is_rsp(type_name: &str) -> bool {
    matches!(
        type_name.to_ascii_lowercase().as_str(),
        "rsp"
            | "rsps"
            | "replicaschedulingpreference"
            | "replicaschedulingpreferences"
            | "replicaschedulingpreferences.scheduling.kubefed.io"
    )
}

/// The `--clusters` table of the KubeFedClusters in `namespace`.
pub async fn clusters(host: &Client, namespace: &str) -> anyhow::Result<String> {
    let api: Api<KubeFedCluster> = Api::namespaced(host.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(clusters_table(&list.items))
}

/// The RSPs of `namespace` (all namespaces when `None`), or the one named, with their
/// divisions.
pub async fn rsps(
    host: &Client,
    namespace: Option<&str>,
    name: Option<&str>,
) -> anyhow::Result<String> {
    let api: Api<ReplicaSchedulingPreference> = match namespace {
        Some(ns) => Api::namespaced(host.clone(), ns),
        None => Api::all(host.clone()),
    };
    let items = match name {
        Some(n) => vec![api.get(n).await?],
        None => api.list(&ListParams::default()).await?.items,
    };
    Ok(rsp_table(&items))
}

/// One row per cluster: readiness, nodes, CPU and memory requested of allocatable, pods.
pub fn clusters_table(clusters: &[KubeFedCluster]) -> String {
    let mut out =
        String::from("CLUSTER\tREADY\tNODES\tCPU (REQ/ALLOC)\tMEMORY (REQ/ALLOC)\tPODS\n");
    for c in clusters {
        let status = c.status.as_ref();
        let ready = status
            .and_then(|s| s.condition("Ready"))
            .map_or("Unknown", |c| c.status.as_str());
        let row = match status.and_then(|s| s.resources.as_ref()) {
            Some(r) => {
                let pair = |k: &str| {
                    let get = |m: &std::collections::BTreeMap<String, String>| {
                        m.get(k).cloned().unwrap_or_else(|| "?".into())
                    };
                    format!("{}/{}", get(&r.requested), get(&r.allocatable))
                };
                format!(
                    "{}/{}\t{}\t{}\t{}",
                    r.ready_nodes,
                    r.nodes,
                    pair("cpu"),
                    pair("memory"),
                    r.pods
                )
            }
            None => "-\t-\t-\t-".to_owned(),
        };
        let _ = writeln!(out, "{}\t{ready}\t{row}", c.name_any());
    }
    align(&out)
}

/// One row per RSP and cluster: replicas written, reason, message.
pub fn rsp_table(rsps: &[ReplicaSchedulingPreference]) -> String {
    let mut out = String::from("NAMESPACE\tRSP\tCLUSTER\tREPLICAS\tREASON\tMESSAGE\n");
    for r in rsps {
        let ns = r.namespace().unwrap_or_default();
        let divisions = r
            .status
            .as_ref()
            .map(|s| s.clusters.as_slice())
            .unwrap_or_default();
        if divisions.is_empty() {
            let _ = writeln!(out, "{ns}\t{}\t-\t-\t-\tnot divided yet", r.name_any());
        }
        for d in divisions {
            let _ = writeln!(
                out,
                "{ns}\t{}\t{}\t{}\t{}\t{}",
                r.name_any(),
                d.name,
                d.replicas,
                d.reason.as_str(),
                d.message
            );
        }
    }
    align(&out)
}

/// How `flotilla diff` shows an RSP-divided object's replicas: a line naming it, then a
/// row per cluster with its replicas, reason and message.
pub fn division_lines(what: &str, divisions: &[ClusterDivision]) -> String {
    let mut rows = String::from("\tCLUSTER\tREPLICAS\tREASON\tMESSAGE\n");
    for d in divisions {
        let _ = writeln!(
            rows,
            "\t{}\t{}\t{}\t{}",
            d.name,
            d.replicas,
            d.reason.as_str(),
            d.message
        );
    }
    format!(
        "replicas of {what}, divided by its ReplicaSchedulingPreference:\n{}",
        align(&rows)
    )
}

/// Tab-separated lines as columns three spaces apart.
fn align(text: &str) -> String {
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 3));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cluster_table_shows_requested_of_allocatable_or_a_dash_without_a_summary() {
        let with: KubeFedCluster = serde_json::from_value(json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
            "metadata": {"name": "member1"},
            "spec": {"apiEndpoint": "https://x", "secretRef": {"name": "s"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": "t"}],
                "resources": {"nodes": 1, "readyNodes": 1, "pods": 5,
                    "allocatable": {"cpu": "2", "memory": "1Gi"},
                    "requested": {"cpu": "1500m", "memory": "300Mi"}}}
        }))
        .expect("a cluster");
        let mut without = with.clone();
        without.metadata.name = Some("member2".into());
        without.status = None;
        let t = clusters_table(&[with, without]);
        let row = |c: &str| {
            t.lines()
                .find(|l| l.starts_with(c))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(row("member1").contains("1500m/2"), "{t}");
        assert!(row("member1").contains("300Mi/1Gi"), "{t}");
        assert!(row("member2").contains("Unknown"), "{t}");
    }

    #[test]
    fn the_rsp_table_has_a_row_per_cluster_with_its_reason() {
        let rsp: ReplicaSchedulingPreference = serde_json::from_value(json!({
            "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 10},
            "status": {"clusters": [
                {"name": "member1", "replicas": 4, "reason": "CapacityEstimate", "message": "capacity estimate 4"},
                {"name": "member2", "replicas": 6, "reason": "Weight"}]}
        }))
        .expect("an rsp");
        let t = rsp_table(&[rsp]);
        assert!(
            t.lines()
                .any(|l| l.contains("member1") && l.contains("CapacityEstimate")),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.contains("member2") && l.contains(" 6 ")),
            "{t}"
        );
        assert!(is_rsp("rsp") && is_rsp("ReplicaSchedulingPreferences") && !is_rsp("deployments"));
    }
}
