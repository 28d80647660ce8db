//! Helpers of the drift tests (push and pull members alike): writes as a named field
//! manager, and waits on a cluster's `status.drift` entry and on drift Events.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{drift::ClusterDrift, federated::FederatedStatus};
use kube::{
    Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{assert::events_about, host::FederatedRef, member::deployments, wait_for};

/// How long a drift entry or an Event may take.
const T: Duration = Duration::from_secs(60);

/// Merge-patches Deployment `name` in `ns` of `member` as field manager `manager` (as
/// `kubectl edit` or an autoscaler would).
pub async fn write_as(
    member: &Client,
    ns: &str,
    name: &str,
    manager: &str,
    patch: serde_json::Value,
) -> anyhow::Result<()> {
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    deployments(member, ns)
        .patch(name, &params, &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// A patch setting `spec.replicas`.
pub fn scale_to(n: i32) -> serde_json::Value {
    json!({"spec": {"replicas": n}})
}

/// `cluster`'s `status.drift` entry once `check` accepts it.
pub async fn wait_drift(
    r: &FederatedRef,
    cluster: &str,
    what: &str,
    check: impl Fn(&ClusterDrift) -> anyhow::Result<()>,
) -> anyhow::Result<ClusterDrift> {
    wait_for(T, what, || async {
        let status: FederatedStatus = r.status().await?;
        let d = status
            .drift
            .iter()
            .find(|d| d.cluster == cluster)
            .cloned()
            .with_context(|| format!("no drift entry for {cluster}: {:?}", status.drift))?;
        check(&d)?;
        Ok(d)
    })
    .await
}

/// The note of an Event with `reason` about `name` in `ns` that contains every word.
pub async fn wait_event(
    host: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    words: &[&str],
) -> anyhow::Result<String> {
    wait_for(T, reason, || async {
        let events = events_about(host, ns, name, reason).await?;
        events
            .iter()
            .filter_map(|e| e.note.clone())
            .find(|n| words.iter().all(|w| n.contains(w)))
            .with_context(|| format!("no {reason} event naming {words:?} among {events:?}"))
    })
    .await
}

/// The drifted fields' paths.
pub fn paths(d: &ClusterDrift) -> Vec<&str> {
    d.fields.iter().map(|f| f.path.as_str()).collect()
}

/// The managers named.
pub fn managers(d: &ClusterDrift) -> Vec<&str> {
    d.managers.iter().map(|m| m.manager.as_str()).collect()
}
