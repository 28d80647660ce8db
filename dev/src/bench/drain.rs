//! The scheduler in the loop (a fleet phase): federated ConfigMaps placed with
//! `maxClusters` and a spread over zones, decided and propagated; then the members holding
//! the most copies are tainted `NoExecute` at once and every copy on them moves (the
//! replacement first, then the old copy removed). Measured from the taints to the last copy
//! gone from the drained members; the taints are removed and the objects deleted after.

use std::time::Instant;

use anyhow::Context as _;
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::info;

use super::{
    FED_NS,
    fleet::{DrainPhase, ZONE_LABEL, busiest, drain_shape},
    phases::wait_propagated,
    report::{percentiles, ratio},
    requests::delta,
    run::Run,
    snapshot::Snapshot,
    tracker::{Tracker, Want},
    warmup::poll,
    workload::{Kind, Starts, to_kube, write_all},
};

/// Federated ConfigMaps of the drain phase (at most `--objects`).
const DRAIN_OBJECTS: usize = 100;
/// The taint of a drained member.
const DRAIN_TAINT: &str = "flotilla-bench/drain";

/// Runs the drain phase (`None` with fewer than 2 members).
pub(super) async fn drain_phase(
    run: &Run,
    members: &Tracker,
    host: &Tracker,
) -> anyhow::Result<Option<DrainPhase>> {
    let Some((drain_count, max_clusters)) = drain_shape(run.members.len()) else {
        return Ok(None);
    };
    let kind = Kind::ConfigMap;
    let count = DRAIN_OBJECTS.min(run.objects);
    let names: Vec<String> = (0..count).map(|i| format!("sched-{i:05}")).collect();
    let min_zones = max_clusters.min(2);
    let placement = json!({
        "clusterSelector": {},
        "maxClusters": max_clusters,
        "spreadConstraints": [{"topologyKey": ZONE_LABEL, "minGroups": min_zones}],
    });
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let started = Instant::now();
    create_placed(run, &api, &names, &placement).await?;
    let placed = count * max_clusters;
    let all_placed = || async {
        Ok::<_, anyhow::Error>(members.held(&names, "1").iter().sum::<usize>() == placed)
    };
    poll(
        run.timeout,
        "every scheduled object in its clusters",
        all_placed,
    )
    .await?;
    let decided_s = started.elapsed().as_secs_f64();
    wait_propagated(run, kind, host).await?;

    let held = members.held(&names, "1");
    let drained = busiest(&held, drain_count);
    let moved_copies: usize = drained.iter().map(|&i| held[i]).sum();
    let affected = members.holders(&names, &drained);
    let before = Snapshot::take(run).await?;
    members.expect_in(Want::Absent, &affected, Some(&drained));
    let (mut latency, moves_s) = drain_and_time(run, members, &drained).await?;
    poll(
        run.timeout,
        "every moved object in its clusters again",
        all_placed,
    )
    .await?;
    wait_propagated(run, kind, host).await?;
    let after = Snapshot::take(run).await?;
    let member_requests = member_requests(&before, &after, kind);
    let placed_after = members.held(&names, "1").iter().sum::<usize>() / max_clusters;
    info!(
        drained = drained.len(),
        moved_objects = affected.len(),
        moves_s,
        "drained"
    );

    set_taints(run, &drained, false).await?;
    remove_all(run, &api, members, &names).await?;
    Ok(Some(DrainPhase {
        objects: count,
        max_clusters,
        min_zones,
        decided_s,
        drained: drained
            .iter()
            .map(|&i| run.kubefed_clusters[i].clone())
            .collect(),
        moved_objects: affected.len(),
        moved_copies,
        moves_s,
        move_latency_ms: percentiles(&mut latency),
        member_requests_per_moved_copy: ratio(member_requests as f64, moved_copies as f64),
        placed_after,
    }))
}

/// Taints the `drained` members at once and waits for the expected moves: each move's
/// latency in ms and the time until the last one.
async fn drain_and_time(
    run: &Run,
    members: &Tracker,
    drained: &[usize],
) -> anyhow::Result<(Vec<f64>, f64)> {
    let tainted = Instant::now();
    set_taints(run, drained, true).await?;
    let reached = members.wait(run.timeout).await?;
    let latency = reached
        .values()
        .map(|t| t.saturating_duration_since(tainted).as_secs_f64() * 1000.0)
        .collect();
    let moves_s = reached
        .values()
        .max()
        .map_or(0.0, |t| t.saturating_duration_since(tainted).as_secs_f64());
    Ok((latency, moves_s))
}

/// Creates the federated ConfigMaps `names` with `placement`.
async fn create_placed(
    run: &Run,
    api: &Api<DynamicObject>,
    names: &[String],
    placement: &serde_json::Value,
) -> anyhow::Result<()> {
    let kind = Kind::ConfigMap;
    write_all(names, run.concurrency, &Starts::default(), |n| {
        let api = api.clone();
        let placement = placement.clone();
        async move {
            let mut o = kind.federated_object(FED_NS, &n, "1").map_err(to_kube)?;
            o.data["spec"]["placement"] = placement;
            api.create(&PostParams::default(), &o).await.map(|_| ())
        }
    })
    .await
}

/// The members' requests for `kind` between two snapshots, summed.
fn member_requests(before: &Snapshot, after: &Snapshot, kind: Kind) -> u64 {
    before
        .members
        .iter()
        .zip(&after.members)
        .map(|(b, a)| {
            delta(b, a, &kind.target().plural, |_, v| v.to_string())
                .values()
                .sum::<u64>()
        })
        .sum()
}

/// Deletes the federated objects `names` and waits until no member holds them.
async fn remove_all(
    run: &Run,
    api: &Api<DynamicObject>,
    members: &Tracker,
    names: &[String],
) -> anyhow::Result<()> {
    members.expect(Want::Absent, names);
    for name in names {
        api.delete(name, &DeleteParams::default()).await?;
    }
    members.wait(run.timeout).await?;
    Ok(())
}

/// Taints the `members` `NoExecute` (or removes the taint), all at once.
async fn set_taints(run: &Run, members: &[usize], on: bool) -> anyhow::Result<()> {
    let api: Api<KubeFedCluster> = Api::namespaced(run.host.clone(), DEFAULT_NAMESPACE);
    let taints = if on {
        json!([{"key": DRAIN_TAINT, "effect": "NoExecute"}])
    } else {
        json!([])
    };
    let patch = json!({"spec": {"taints": taints}});
    let pp = PatchParams::default();
    futures::future::try_join_all(members.iter().map(|&i| {
        let name = &run.kubefed_clusters[i];
        let (api, patch, pp) = (&api, &patch, &pp);
        async move {
            api.patch(name, pp, &Patch::Merge(patch))
                .await
                .with_context(|| format!("tainting KubeFedCluster {name}"))
        }
    }))
    .await?;
    Ok(())
}
