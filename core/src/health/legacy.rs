//! The hand-coded workload health that the built-in CEL rules replaced, kept only as the
//! oracle the built-in rules are compared with (see `tests`).

use serde_json::Value;

use crate::workload::ClusterWorkload;
use flotilla_api::workload::{Counts, WorkloadKind};

/// One cluster's pod figure: (ready, desired), and whether that cluster counts as ready.
fn figure(kind: WorkloadKind, c: &ClusterWorkload<'_>, counts: &Counts) -> (i64, i64, bool) {
    let spec_n = |field: &str, default: i64| {
        c.spec
            .and_then(|s| s.get(field))
            .and_then(Value::as_i64)
            .unwrap_or(default)
    };
    let (ready, desired, rolled_out) = match kind {
        WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::ReplicaSet => {
            let desired = spec_n("replicas", 1);
            let updated = counts.updated_replicas.unwrap_or(desired);
            let ready = counts.ready_replicas.unwrap_or(0);
            (ready, desired, updated >= desired)
        }
        WorkloadKind::DaemonSet => {
            let desired = counts.desired_number_scheduled.unwrap_or(0);
            let updated = counts.updated_number_scheduled.unwrap_or(0);
            (
                counts.number_ready.unwrap_or(0),
                desired,
                updated >= desired,
            )
        }
        WorkloadKind::Job => (
            counts.succeeded.unwrap_or(0),
            spec_n("completions", 1),
            true,
        ),
    };
    let observed = c
        .status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    let current = match (c.generation, observed) {
        (Some(generation), Some(observed)) => observed >= generation,
        // Jobs have no observedGeneration; an unknown generation is not held against it.
        _ => true,
    };
    let cluster_ready =
        c.propagated && c.status.is_some() && current && rolled_out && ready >= desired;
    (ready, desired, cluster_ready)
}

/// The old `aggregate`'s figures: (clusters, pods).
pub fn aggregate(kind: WorkloadKind, clusters: &[ClusterWorkload<'_>]) -> (String, String) {
    let (mut ready, mut desired, mut ready_clusters) = (0, 0, 0);
    for c in clusters {
        let mine = Counts::read(kind, c.status);
        let (r, d, cluster_ready) = figure(kind, c, &mine);
        if c.status.is_some() {
            ready += r;
        }
        desired += d;
        ready_clusters += i64::from(cluster_ready);
    }
    (
        format!("{ready_clusters}/{}", clusters.len()),
        format!("{ready}/{desired}"),
    )
}

/// `Ok` when the member object is healthy; otherwise why not. `kind` is the workload kind
/// when its status is collected (`None`: propagated is healthy).
pub fn member_health(kind: Option<WorkloadKind>, member: &Value) -> Result<(), String> {
    let Some(kind) = kind else {
        return Ok(());
    };
    let status = member.get("status").filter(|s| !s.is_null());
    let Some(status) = status else {
        return Err("the member reports no status yet".into());
    };
    let spec = member.get("spec");
    let c = ClusterWorkload {
        cluster: "",
        propagated: true,
        spec,
        generation: member
            .pointer("/metadata/generation")
            .and_then(Value::as_i64),
        status: Some(status),
    };
    let (clusters, pods) = aggregate(kind, &[c]);
    let desired = spec
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let n = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
    // A Deployment is rolled out when updated = ready = available = desired replicas and
    // no pod of an older version remains (those still count as ready while the new ones
    // never get ready).
    let deployment_ok = kind != WorkloadKind::Deployment
        || (n("availableReplicas") >= desired && n("replicas") <= n("updatedReplicas"));
    if clusters == "1/1" && deployment_ok {
        return Ok(());
    }
    let pods = match kind {
        WorkloadKind::Deployment => format!(
            "{} updated, {} ready, {} available of {desired} replicas; {} in total",
            n("updatedReplicas"),
            n("readyReplicas"),
            n("availableReplicas"),
            n("replicas")
        ),
        WorkloadKind::Job => format!("{pods} completions"),
        _ => format!("{pods} pods ready"),
    };
    Err(match false_condition(status) {
        Some(c) => format!("{c} ({pods})"),
        None => format!("not rolled out: {pods}"),
    })
}

/// The member's first condition that is not True, as `Type Reason: message`.
fn false_condition(status: &Value) -> Option<String> {
    let conditions = status.get("conditions")?.as_array()?;
    conditions.iter().find_map(|c| {
        let field = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
        (field("status") != "True").then(|| {
            format!(
                "{} {}: {}",
                field("type"),
                field("reason"),
                field("message")
            )
            .trim()
            .to_string()
        })
    })
}
