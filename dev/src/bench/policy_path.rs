//! The policy path's phases (`--policy`): the same objects as the other two paths, written
//! as plain objects into a host namespace of their own ([`POLICY_NS`]) and selected by one
//! PropagationPolicy; the policy controller makes a Federated object for each and the sync
//! controller propagates it. Create, steady state, restart, update and delete, measured on
//! the running control plane right after the `Federated<Kind>` phases of the same kind. It
//! measures; what the figures mean is `policy_report`'s.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use anyhow::Context as _;
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster,
    federated::FederatedStatus,
    policy::{MATERIALIZED_LABEL, PropagationPolicy},
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tracing::info;

use super::{
    BENCH_LABEL, MANAGER, POLICY_NS, POLICY_SELECT_LABEL,
    phases::{Phases, Template, Write},
    policy_report::{
        HostCost, NOT_COUNTED, Own, PolicyPath, Quiet, ThreePaths, WRITE_VERBS, host_cost, key,
        writes_of,
    },
    report::{Comparison, Phase},
    requests::{RequestCounts, delta, request_counts},
    restart::Restarter,
    run::Run,
    snapshot::Snapshot,
    tracker::{Tracker, Want},
    warmup::{ensure_namespace, poll},
    workload::{Kind, names, to_kube},
};

/// Name of the benchmark's PropagationPolicy.
const POLICY: &str = "flotilla-bench";
/// Name of the object created after the restart window.
const PROBE: &str = "policy-restart-probe";

/// The watchers of one kind's policy path.
pub(super) struct PolicyTrackers {
    /// Managed member copies of the native objects.
    pub(super) members: Arc<Tracker>,
    /// The Federated objects the policy controller made.
    pub(super) host: Arc<Tracker>,
}

/// What the policy path of one kind measured.
pub(super) struct PolicyPhases {
    pub(super) create: (Phase, HostCost),
    pub(super) update: (Phase, HostCost),
    pub(super) delete: (Phase, HostCost),
    pub(super) steady: Quiet,
    pub(super) restart: Quiet,
    pub(super) probe_after_restart_s: f64,
}

impl PolicyPhases {
    /// The policy path's report, each phase beside the other two paths' `Comparison`.
    pub(super) fn report(
        self,
        create: &Comparison,
        update: &Comparison,
        delete: &Comparison,
    ) -> PolicyPath {
        PolicyPath {
            create: ThreePaths::new(create, self.create.0, self.create.1),
            update: ThreePaths::new(update, self.update.0, self.update.1),
            delete: ThreePaths::new(delete, self.delete.0, self.delete.1),
            steady: self.steady,
            restart: self.restart,
            probe_after_restart_s: self.probe_after_restart_s,
            not_counted: NOT_COUNTED.map(String::from).into(),
        }
    }
}

/// Starts the policy path's watchers of `kind`.
pub(super) async fn start_trackers(run: &Run, kind: Kind) -> anyhow::Result<PolicyTrackers> {
    let vo = move |o: &DynamicObject| kind.version_of(o);
    let t = PolicyTrackers {
        members: Tracker::start(
            &run.members,
            &kind.target(),
            POLICY_NS,
            &format!("{BENCH_LABEL}=policy,{}=true", flotilla_api::MANAGED_LABEL),
            vo,
        ),
        host: Tracker::start(
            std::slice::from_ref(&run.host),
            &kind.federated(),
            POLICY_NS,
            &format!("{MATERIALIZED_LABEL}=true"),
            |_| Some(String::new()),
        ),
    };
    for tracker in [&t.members, &t.host] {
        tracker
            .wait_synced(std::time::Duration::from_secs(60))
            .await?;
    }
    Ok(t)
}

/// The host namespace of the native objects and the PropagationPolicy that selects every
/// kind's objects there (label [`POLICY_SELECT_LABEL`]) onto every member; returns once
/// the policy reports Ready. The members' namespace is left to the policy controller's
/// FederatedNamespace, whose cost is part of the path.
pub(super) async fn create_policy(run: &Run, kinds: &[Kind]) -> anyhow::Result<()> {
    ensure_namespace(&run.host, POLICY_NS).await?;
    let selectors: Vec<Value> = kinds
        .iter()
        .map(|k| {
            json!({"apiVersion": k.target().api_version, "kind": k.target().kind,
                "labelSelector": {"matchLabels": {POLICY_SELECT_LABEL: "true"}}})
        })
        .collect();
    let policy: PropagationPolicy = serde_json::from_value(json!({
        "apiVersion": "policy.flotilla.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": POLICY, "namespace": POLICY_NS},
        "spec": {"resourceSelectors": selectors, "placement": {"clusterSelector": {}}},
    }))?;
    let api: Api<PropagationPolicy> = Api::namespaced(run.host.clone(), POLICY_NS);
    api.patch(
        POLICY,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&policy),
    )
    .await
    .context("creating the benchmark's PropagationPolicy")?;
    poll(run.timeout, "the PropagationPolicy Ready", || async {
        let p = api.get(POLICY).await?;
        Ok(p.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        }))
    })
    .await
}

/// Creates, updates and deletes the native objects of `kind`, with the steady state and a
/// restart between create and update, as the `Federated<Kind>` path does.
pub(super) async fn policy_phases(
    run: &Run,
    kind: Kind,
    t: &PolicyTrackers,
    restarter: &mut Restarter<'_>,
) -> anyhow::Result<PolicyPhases> {
    let names = &names(kind, run.objects_of(kind));
    let m = Measurer {
        run,
        kind,
        names,
        t,
        policy_gets: Arc::new(AtomicU64::new(0)),
    };
    let create = m
        .phase(Write::Create(Template::Native(POLICY_NS)), "POST")
        .await?;
    info!(
        kind = kind.name(),
        seconds = create.0.seconds,
        "policy path: created"
    );
    let steady = m.steady().await?;
    info!(kind = kind.name(), member_writes = steady.member_writes, host_writes = ?steady.host_writes, "policy path: steady state");
    let restart = m.restart(restarter).await?;
    info!(kind = kind.name(), member_writes = restart.member_writes, host_writes = ?restart.host_writes, "policy path: restart");
    let probe_after_restart_s = m.probe().await?;
    let patch = kind.version_patch("2");
    let update = m.phase(Write::Patch(&patch), "PATCH").await?;
    info!(
        kind = kind.name(),
        seconds = update.0.seconds,
        "policy path: updated"
    );
    let delete = m.phase(Write::Delete, "DELETE").await?;
    info!(
        kind = kind.name(),
        seconds = delete.0.seconds,
        "policy path: deleted"
    );
    Ok(PolicyPhases {
        create,
        update,
        delete,
        steady,
        restart,
        probe_after_restart_s,
    })
}

/// One kind's policy path and the benchmark's own reads of the policy (taken out).
struct Measurer<'a> {
    run: &'a Run,
    kind: Kind,
    names: &'a [String],
    t: &'a PolicyTrackers,
    policy_gets: Arc<AtomicU64>,
}

impl Measurer<'_> {
    /// The host resources of the path: the native kind, its Federated kind, the
    /// FederatedNamespace, the policy (its status) and Events.
    fn resources(&self) -> Vec<String> {
        vec![
            self.kind.target().plural,
            self.kind.federated().plural,
            super::workload::federated_namespace().plural,
            "propagationpolicies".into(),
            "events".into(),
        ]
    }

    /// One measured phase: `write` to every native object, until the members show it and
    /// the host settled (every Federated object propagated, the policy's count current).
    async fn phase(&self, write: Write<'_>, own_verb: &str) -> anyhow::Result<(Phase, HostCost)> {
        let (run, kind) = (self.run, self.kind);
        let api = Api::namespaced_with(run.host.clone(), POLICY_NS, &kind.target());
        let phases = Phases {
            run,
            kind,
            names: self.names,
            tracker: &self.t.members,
            apis: std::slice::from_ref(&api),
            only: None,
        };
        let before = request_counts(&run.host).await?;
        let (lists, gets) = self.own_reads();
        let deleting = matches!(write, Write::Delete);
        let phase = phases
            .measure(write, ("", 0), || self.settle(deleting))
            .await?;
        let after = request_counts(&run.host).await?;
        let (lists_after, gets_after) = self.own_reads();
        let own: Own = [
            (
                key(&kind.target().plural, "", own_verb),
                self.names.len() as u64,
            ),
            (
                key(&kind.federated().plural, "", "LIST"),
                lists_after - lists,
            ),
            (key("propagationpolicies", "", "GET"), gets_after - gets),
        ]
        .into();
        let cost = host_cost(&before, &after, &self.resources(), &own, self.names.len());
        Ok((phase, cost))
    }

    /// LISTs of Federated objects and GETs of the policy the benchmark sent so far.
    fn own_reads(&self) -> (u64, u64) {
        (
            self.run.own_lists.load(Ordering::Relaxed),
            self.policy_gets.load(Ordering::Relaxed),
        )
    }

    /// Waits for the trailing work of a phase: the Federated objects propagated (or gone),
    /// the policy's status counting what it selects, the host quiet.
    async fn settle(&self, deleting: bool) -> anyhow::Result<()> {
        let (run, kind, n) = (self.run, self.kind, self.names.len());
        if deleting {
            self.t.host.expect(Want::Absent, self.names);
            self.t.host.wait(run.timeout).await?;
        } else {
            let api: Api<DynamicObject> =
                Api::namespaced_with(run.host.clone(), POLICY_NS, &kind.federated());
            let lp = ListParams::default().labels(&format!("{MATERIALIZED_LABEL}=true"));
            poll(
                run.timeout,
                "every policy-made Federated object propagated",
                || async {
                    run.own_lists.fetch_add(1, Ordering::Relaxed);
                    let list = api.list(&lp).await?;
                    Ok(list.items.len() >= n
                        && list.items.iter().all(|o| {
                            let s = FederatedStatus::from_dynamic(o);
                            s.observed_generation == o.metadata.generation.unwrap_or(0)
                                && s.propagation().is_some_and(|c| c.status == "True")
                        }))
                },
            )
            .await?;
        }
        let want = if deleting { 0 } else { n as i64 };
        let api: Api<PropagationPolicy> = Api::namespaced(run.host.clone(), POLICY_NS);
        poll(run.timeout, "the policy's selected count", || async {
            self.policy_gets.fetch_add(1, Ordering::Relaxed);
            let p = api.get(POLICY).await?;
            Ok(p.status.map_or(0, |s| s.selected_count) == want)
        })
        .await?;
        self.t.host.quiet(run.timeout).await;
        Ok(())
    }

    /// Forces a resync of every object (each KubeFedCluster's labels, which requeue every
    /// Federated object and every native object a policy selects) and counts the writes of
    /// a window.
    async fn steady(&self) -> anyhow::Result<Quiet> {
        let run = self.run;
        let before = Snapshot::take(run).await?;
        let api: Api<KubeFedCluster> = Api::namespaced(run.host.clone(), DEFAULT_NAMESPACE);
        let stamp = k8s_openapi::jiff::Timestamp::now()
            .as_millisecond()
            .to_string();
        for name in &run.kubefed_clusters {
            let patch = json!({"metadata": {"labels": {"flotilla-bench/resync": stamp}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("labelling KubeFedCluster {name}"))?;
        }
        tokio::time::sleep(run.steady).await;
        let after = Snapshot::take(run).await?;
        let cause = format!(
            "{} KubeFedCluster label changes (every object requeued)",
            run.kubefed_clusters.len()
        );
        Ok(self.quiet(&before, &after, cause))
    }

    /// Restarts the control plane hard and counts the writes of a window that lasts until
    /// it is ready and at least the steady-state window.
    async fn restart(&self, restarter: &mut Restarter<'_>) -> anyhow::Result<Quiet> {
        let run = self.run;
        let before = Snapshot::take(run).await?;
        let started = restarter.restart(run).await?;
        if let Some(cp) = restarter.cp.as_mut() {
            cp.wait_ready(run).await?;
        }
        if let Some(rest) = run.steady.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        let after = Snapshot::take(run).await?;
        Ok(self.quiet(
            &before,
            &after,
            "a hard restart of the control plane".into(),
        ))
    }

    /// The write requests between two snapshots: the kind's in the members, the path's
    /// resources in the host.
    fn quiet(&self, before: &Snapshot, after: &Snapshot, cause: String) -> Quiet {
        let target = self.kind.target().plural;
        let member_writes = before
            .members
            .iter()
            .zip(&after.members)
            .flat_map(|(b, a)| delta(b, a, &target, |_, verb| verb.to_string()))
            .filter(|(verb, _)| WRITE_VERBS.contains(&verb.as_str()))
            .map(|(_, n)| n)
            .sum();
        Quiet {
            window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
            cause,
            member_writes,
            host_writes: host_writes(&before.host, &after.host, &self.resources()),
        }
    }

    /// A native object created after the restart window: seconds until every member holds
    /// it; then it is deleted again (unmeasured).
    async fn probe(&self) -> anyhow::Result<f64> {
        let (run, kind) = (self.run, self.kind);
        let api: Api<DynamicObject> =
            Api::namespaced_with(run.host.clone(), POLICY_NS, &kind.target());
        let mut o = kind.native_object(POLICY_NS, PROBE, "1").map_err(to_kube)?;
        o.metadata
            .labels
            .get_or_insert_default()
            .insert(BENCH_LABEL.into(), "probe".into());
        let started = Instant::now();
        api.create(&PostParams::default(), &o).await?;
        self.wait_probe(true).await?;
        let seconds = started.elapsed().as_secs_f64();
        api.delete(PROBE, &DeleteParams::default()).await?;
        self.wait_probe(false).await?;
        Ok(seconds)
    }

    async fn wait_probe(&self, present: bool) -> anyhow::Result<()> {
        let (run, kind) = (self.run, self.kind);
        poll(
            run.timeout,
            "the policy path's probe in the members",
            || async {
                for m in &run.members {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(m.clone(), POLICY_NS, &kind.target());
                    if api.get_opt(PROBE).await?.is_some() != present {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
        .await
    }
}

/// The write requests of a window on `resources` of the host (nothing of the benchmark's
/// own is among them: it only labels KubeFedClusters).
fn host_writes(
    before: &RequestCounts,
    after: &RequestCounts,
    resources: &[String],
) -> BTreeMap<String, u64> {
    writes_of(&host_cost(before, after, resources, &Own::new(), 1).requests)
}
