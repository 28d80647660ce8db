//! Canary by replica share in the sync controller (`spec.rollout.strategy: Canary`): before
//! the member writes, [`Rollout::canary`] reads the split (each placed cluster's `spec.replicas`
//! as placement, overrides and the ReplicaSchedulingPreference computed it), each cluster's
//! canary and stable Deployment, asks [`canary_flow::course`] where the canary stands, and
//! carries out its render: the stable Deployment's desired object is rewritten (its
//! revision, its share of the replicas) and goes through the normal member writes; the
//! canary Deployment `<name>-canary` is written or deleted here, in the same member, through
//! the same member write path ([`run_on_member`]) — in a Pull cluster, carried in a Work
//! and read back from the agent's report ([`super::canary_pull`]). In a Push cluster the
//! canary is owned by the stable Deployment in the member (an owner reference), so the
//! member's garbage collector removes it with the stable one (the federated object deleted,
//! the cluster left the placement); in a Pull cluster it leaves its Work then. Everything
//! it needs is in status, the members and the Works: a restart carries on.

use std::{collections::BTreeMap, time::Duration};

use flotilla_api::{
    federated::FederatedSpec,
    rollout::{REVISION_ANNOTATION, RolloutStatus},
};
use flotilla_core::{
    health::TypeHealth,
    rollout::{
        canary::{CANARY_LABEL, Share, canary_name, replicas_to_share, shares},
        canary_flow::{self, ClusterFacts, Input, Render},
        health::member_verdict,
    },
};
use futures::future::join_all;
use kube::{ResourceExt, api::DeleteParams, core::DynamicObject};
use serde_json::{Value, json};
use tracing::warn;

use super::{
    Members, Rollout, RolloutRound, annotation, canary_pull::PullCanaries, invalid_round,
    revision_of, set_annotation,
};
use crate::{
    multicluster::ClusterState,
    sync::{
        Key,
        dispatch::{MemberOp, MemberRef, run_on_member},
        plan::{DesiredFor, DesiredSet, HASH_ANNOTATION, Observed, Outcome},
    },
};

/// What one cluster runs: the stable Deployment's revision and replicas, and the canary's
/// replicas (`None`: no canary).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClusterPlan {
    stable_revision: String,
    stable_replicas: i64,
    canary_replicas: Option<i64>,
}

/// A placed cluster: its name, its canary at the step, its stable Deployment on the target
/// (each healthy, or why not).
type Facts = (String, Result<(), String>, Result<(), String>);

/// A write of a canary Deployment.
enum CanaryOp {
    Create(Value),
    Update(Value),
    Delete,
}

impl Rollout<'_> {
    /// For `strategy: Canary`: decides the canary's step and rewrites `desired` (the stable
    /// Deployments); applies or deletes the canaries. `None` without a canary strategy.
    pub(super) async fn canary(
        &self,
        key: &Key,
        fed: &DynamicObject,
        spec: &FederatedSpec,
        members: Members<'_>,
        desired: &mut DesiredSet,
    ) -> Option<RolloutRound> {
        let rollout = spec.rollout.as_ref().filter(|r| r.is_canary())?;
        let stored = self.stored_status(key, fed);
        let split = split_of(desired);
        let checked = rollout.validate();
        let checked = checked.and_then(|()| shareable(&self.ty.target_ar.kind, &split));
        if let Err(message) = checked {
            // Propagated as without a canary: any canary goes.
            let none = BTreeMap::new();
            let pull = self.pull_canaries(&members).await;
            let ops = self.canary_ops(key, &members, pull, &none, None, &BTreeMap::new());
            self.run_canary_ops(key, &members, ops).await;
            return Some(invalid_round(stored, message));
        }
        let (target, content) = revision_of(spec);
        if let Err(e) = self.revisions.ensure(fed, key, &target, &content).await {
            warn!(error = %e, "storing the rollout revision failed");
        }
        let pull = self.pull_canaries(&members).await;
        let expected = shares(&split, stored_percent(&stored.rollout, &target));
        let facts = self.canary_facts(key, &members, desired, &expected, &target, pull);
        let clusters: Vec<ClusterFacts<'_>> = (facts.iter())
            .map(|(name, canary, stable)| ClusterFacts {
                name,
                canary: canary.clone(),
                stable: stable.clone(),
            })
            .collect();
        let course = canary_flow::course(&Input {
            spec: rollout,
            target: &target,
            generation: fed.metadata.generation.unwrap_or(0),
            previous: stored.rollout.as_ref(),
            clusters: &clusters,
            now: crate::sync::plan::decision::now(),
        });
        let plans = (split.iter())
            .map(|(c, full)| {
                (
                    c.clone(),
                    cluster_plan(&course.render, &target, &split, c, *full),
                )
            })
            .collect();
        let targets = target_objects(desired);
        self.render_stable(key, spec, desired, &plans, &target)
            .await;
        let ops = self.canary_ops(key, &members, pull, &targets, Some(&target), &plans);
        self.run_canary_ops(key, &members, ops).await;
        Some(RolloutRound {
            status: Some(course.status),
            reason: course.reason,
            message: course.message,
            events: course.events,
            recheck: (course.recheck_after)
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1))),
        })
    }

    /// Each placed cluster's canary (at the stored step) and stable Deployment (on the
    /// target), healthy or why not.
    fn canary_facts(
        &self,
        key: &Key,
        members: &Members<'_>,
        desired: &DesiredSet,
        expected: &BTreeMap<String, Share>,
        target: &str,
        pull: Option<&PullCanaries>,
    ) -> Vec<Facts> {
        let health = self.ty.health.as_deref();
        (members.snapshot.iter().zip(members.observed))
            .filter(|(c, _)| expected.contains_key(&c.name))
            .map(|(cluster, observed)| {
                let replicas = expected.get(&cluster.name).map_or(0, |s| s.canary);
                let seen = self.observe_canary(cluster, key, pull);
                let canary = canary_check(health, &seen, target, replicas);
                let stable = stable_check(health, observed, desired.hash(&cluster.name));
                (cluster.name.clone(), canary, stable)
            })
            .collect()
    }

    /// The Pull clusters' canaries, once they can be read (`None`: no Pull cluster, or their
    /// cache has not listed: a Pull cluster's canary is then left as it is this round).
    async fn pull_canaries(&self, members: &Members<'_>) -> Option<&PullCanaries> {
        let canaries = self.canaries?;
        let any_pull = members.snapshot.iter().any(|c| c.pull);
        (any_pull && canaries.ready().await).then_some(canaries)
    }

    /// `cluster`'s canary of `key`: from the member cache, or (a Pull cluster) from its
    /// Work (not synced while `pull`, the Pull side, cannot be read).
    fn observe_canary(
        &self,
        cluster: &ClusterState,
        key: &Key,
        pull: Option<&PullCanaries>,
    ) -> Observed {
        if cluster.pull {
            return pull.map_or(Observed::NotSynced, |c| c.observe(&cluster.name, key));
        }
        (self.observer).observe(cluster, &(key.0.clone(), canary_name(&key.1)))
    }

    /// Rewrites each placed cluster's desired object to its stable Deployment: the
    /// revision and the replicas of its plan. A revision whose record is gone leaves the
    /// member as it is.
    async fn render_stable(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        desired: &mut DesiredSet,
        plans: &BTreeMap<String, ClusterPlan>,
        target: &str,
    ) {
        for (cluster, plan) in plans {
            let full = desired_replicas(desired.by_cluster.get(cluster));
            let object = if plan.stable_revision == target {
                match desired.by_cluster.get(cluster) {
                    Some(DesiredFor::Object { object, .. }) => Some(object.clone()),
                    _ => None,
                }
            } else {
                match self.render(key, spec, &plan.stable_revision, cluster).await {
                    Some(DesiredFor::Object { object, .. }) => Some(object),
                    _ => None,
                }
            };
            let Some(mut object) = object else {
                desired.by_cluster.remove(cluster);
                continue;
            };
            let changed = plan.stable_revision != target || Some(plan.stable_replicas) != full;
            let hash = if changed {
                set_replicas(&mut object, plan.stable_replicas);
                rehash(&mut object)
            } else {
                desired.hash(cluster).unwrap_or_default().to_string()
            };
            set_annotation(&mut object, REVISION_ANNOTATION, &plan.stable_revision);
            (desired.by_cluster).insert(cluster.clone(), DesiredFor::Object { object, hash });
        }
    }

    /// The canary write each cluster needs (`target`: `None` removes every canary).
    fn canary_ops(
        &self,
        key: &Key,
        members: &Members<'_>,
        pull: Option<&PullCanaries>,
        targets: &BTreeMap<String, Value>,
        target: Option<&str>,
        plans: &BTreeMap<String, ClusterPlan>,
    ) -> Vec<(usize, CanaryOp)> {
        let ar = &self.ty.target_ar;
        let mut ops = Vec::new();
        for (i, (cluster, observed)) in members.snapshot.iter().zip(members.observed).enumerate() {
            if cluster.pull && pull.is_none() {
                continue;
            }
            let seen = self.observe_canary(cluster, key, pull);
            let base = targets.get(&cluster.name);
            let wanted = match (target, plans.get(&cluster.name), observed, base) {
                (Some(t), Some(p), Observed::Present(stable), Some(base)) => {
                    p.canary_replicas.map(|r| (base, stable, r, t))
                }
                _ => None,
            };
            match wanted {
                Some((base, stable, replicas, t)) => {
                    // A Pull cluster's stable Deployment is known by its manifest (no UID).
                    let owner = (!cluster.pull).then_some(stable);
                    let Some(obj) = canary_object(base, owner, replicas, t, &ar.api_version) else {
                        continue;
                    };
                    match &seen {
                        Observed::Present(o)
                            if annotation(o, HASH_ANNOTATION)
                                == annotation(&obj, HASH_ANNOTATION) => {}
                        Observed::Present(_) => ops.push((i, CanaryOp::Update(obj))),
                        _ => ops.push((i, CanaryOp::Create(obj))),
                    }
                }
                None => {
                    if matches!(&seen, Observed::Present(o) if o.pointer("/metadata/deletionTimestamp").is_none())
                    {
                        ops.push((i, CanaryOp::Delete));
                    }
                }
            }
        }
        ops
    }

    /// Runs the canary writes, all clusters at once, through the one member write path
    /// (the cluster's permit, its circuit breaker, the timeout). A failure is logged; the
    /// canary's health says the rest (its step does not move on without it).
    async fn run_canary_ops(&self, key: &Key, members: &Members<'_>, ops: Vec<(usize, CanaryOp)>) {
        let name = &canary_name(&key.1);
        let (ns, _) = self.ty.member_name(key);
        let background = DeleteParams::background();
        let (pull, push): (Vec<_>, Vec<_>) =
            (ops.into_iter()).partition(|(i, _)| members.snapshot.get(*i).is_some_and(|c| c.pull));
        if let Some(canaries) = self.canaries {
            for (i, op) in pull {
                let Some(cluster) = members.snapshot.get(i) else {
                    continue;
                };
                let canary = match op {
                    CanaryOp::Create(o) | CanaryOp::Update(o) => Some(o),
                    CanaryOp::Delete => None,
                };
                canaries.set(&cluster.name, key, canary).await;
            }
        }
        let jobs = push.into_iter().filter_map(|(i, op)| {
            let cluster: &ClusterState = members.snapshot.get(i)?;
            let target = MemberRef {
                cluster: cluster.name.clone(),
                api: self.ty.member_api(cluster.client.clone()?, ns),
                name: name.clone(),
            };
            let op = match op {
                CanaryOp::Create(object) => MemberOp::Create {
                    object,
                    adopt: false,
                },
                // The selector is immutable: a canary whose selector changed is recreated.
                CanaryOp::Update(object) => MemberOp::Update {
                    object,
                    recreate: true,
                },
                CanaryOp::Delete => MemberOp::Delete(background.clone()),
            };
            Some(async move {
                if let Outcome::Status(reason, message) =
                    run_on_member(self.shared, target, op).await
                {
                    warn!(cluster = %cluster.name, canary = %name, %reason, %message, "writing a canary Deployment failed");
                }
            })
        });
        join_all(jobs).await;
    }
}

/// The percentage of the stored step of a canary of `target` (0: none yet).
fn stored_percent(stored: &Option<RolloutStatus>, target: &str) -> u32 {
    (stored.as_ref())
        .filter(|s| s.target_revision == target)
        .and_then(|s| s.canary.as_ref())
        .map_or(0, |c| c.percent)
}

/// Whether a canary by replica share applies: a Deployment with replicas to share.
fn shareable(kind: &str, split: &BTreeMap<String, i64>) -> Result<(), String> {
    if kind != "Deployment" {
        return Err(format!(
            "a canary by replica share is for Deployments, not {kind}: propagated without a canary"
        ));
    }
    replicas_to_share(split)
        .map(|_| ())
        .map_err(|e| format!("{e}: propagated without a canary"))
}

/// Each placed cluster's replicas (its desired object's `spec.replicas`).
fn split_of(desired: &DesiredSet) -> BTreeMap<String, i64> {
    (desired.by_cluster.iter())
        .filter(|(_, d)| matches!(d, DesiredFor::Object { .. }))
        .map(|(c, d)| (c.clone(), desired_replicas(Some(d)).unwrap_or(0)))
        .collect()
}

/// Each placed cluster's desired object on the target, before the stable rewrite.
fn target_objects(desired: &DesiredSet) -> BTreeMap<String, Value> {
    (desired.by_cluster.iter())
        .filter_map(|(c, d)| match d {
            DesiredFor::Object { object, .. } => Some((c.clone(), object.clone())),
            DesiredFor::Failed(..) => None,
        })
        .collect()
}

fn desired_replicas(d: Option<&DesiredFor>) -> Option<i64> {
    match d {
        Some(DesiredFor::Object { object, .. }) => {
            object.pointer("/spec/replicas").and_then(Value::as_i64)
        }
        _ => None,
    }
}

/// What `cluster` (of split `full`) runs under `render`.
fn cluster_plan(
    render: &Render,
    target: &str,
    split: &BTreeMap<String, i64>,
    cluster: &str,
    full: i64,
) -> ClusterPlan {
    match render {
        Render::Stable { revision } => ClusterPlan {
            stable_revision: revision.clone(),
            stable_replicas: full,
            canary_replicas: None,
        },
        Render::Split { stable, percent } => {
            let share = shares(split, *percent)
                .get(cluster)
                .copied()
                .unwrap_or_default();
            ClusterPlan {
                stable_revision: stable.clone(),
                stable_replicas: share.stable,
                canary_replicas: Some(share.canary),
            }
        }
        Render::Promote => ClusterPlan {
            stable_revision: target.to_string(),
            stable_replicas: full,
            canary_replicas: Some(full),
        },
    }
}

/// The canary is at the step: it runs `target` with `replicas` and is healthy.
fn canary_check(
    health: Option<&TypeHealth>,
    seen: &Observed,
    target: &str,
    replicas: i64,
) -> Result<(), String> {
    let obj = match seen {
        Observed::Present(obj) => obj,
        Observed::NotReady => return Err("the cluster is not ready".into()),
        _ => return Err("the canary Deployment is not created yet".into()),
    };
    if annotation(obj, REVISION_ANNOTATION).as_deref() != Some(target) {
        return Err("the canary Deployment does not run the new revision yet".into());
    }
    if obj.pointer("/spec/replicas").and_then(Value::as_i64) != Some(replicas) {
        return Err(format!(
            "the canary Deployment does not hold this step's {replicas} replicas yet"
        ));
    }
    member_verdict(health, obj).0
}

/// The stable Deployment holds the target's desired object (`hash`) and is healthy.
fn stable_check(
    health: Option<&TypeHealth>,
    observed: &Observed,
    hash: Option<&str>,
) -> Result<(), String> {
    match observed {
        Observed::Present(obj) if annotation(obj, HASH_ANNOTATION).as_deref() == hash => {
            member_verdict(health, obj).0
        }
        Observed::Present(_) => {
            Err("the stable Deployment does not hold the new template yet".into())
        }
        Observed::NotReady => Err("the cluster is not ready".into()),
        _ => Err("the stable Deployment is not created yet".into()),
    }
}

fn set_replicas(object: &mut Value, replicas: i64) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), json!(replicas));
    }
}

/// Hashes the object without its hash annotation and records the new hash on it.
fn rehash(object: &mut Value) -> String {
    if let Some(ann) = (object.pointer_mut("/metadata/annotations")).and_then(Value::as_object_mut)
    {
        ann.remove(HASH_ANNOTATION);
    }
    let hash = flotilla_api::hash::content_hash(object);
    set_annotation(object, HASH_ANNOTATION, &hash);
    hash
}

/// The canary Deployment of a cluster: the target's desired object `base`, renamed,
/// labelled `flotilla.io/canary: "true"` (on it, in its selector, on its pod template),
/// with `replicas`, owned by the member's `stable` Deployment when given (a Push cluster;
/// `None` without its name and uid) — a Pull cluster's canary has no owner reference.
fn canary_object(
    base: &Value,
    stable: Option<&Value>,
    replicas: i64,
    target: &str,
    api_version: &str,
) -> Option<Value> {
    let mut obj = base.clone();
    obj.as_object_mut()?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!("Deployment");
    if let Some(stable) = stable {
        let stable_name = stable.pointer("/metadata/name")?.as_str()?;
        let uid = stable.pointer("/metadata/uid")?.as_str()?;
        obj["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": "Deployment", "name": stable_name, "uid": uid,
        }]);
    }
    let stable_name = base.pointer("/metadata/name")?.as_str()?.to_owned();
    obj["metadata"]["name"] = json!(canary_name(&stable_name));
    for path in [
        "/metadata/labels",
        "/spec/selector/matchLabels",
        "/spec/template/metadata/labels",
    ] {
        let labels = ensure_object(&mut obj, path)?;
        labels.insert(CANARY_LABEL.into(), json!("true"));
    }
    set_replicas(&mut obj, replicas);
    rehash(&mut obj);
    set_annotation(&mut obj, REVISION_ANNOTATION, target);
    Some(obj)
}

/// The object at `path` (`/a/b/c`), created empty where missing.
fn ensure_object<'v>(
    obj: &'v mut Value,
    path: &str,
) -> Option<&'v mut serde_json::Map<String, Value>> {
    let mut at = obj;
    for part in path.trim_start_matches('/').split('/') {
        let map = at.as_object_mut()?;
        at = map.entry(part).or_insert_with(|| json!({}));
    }
    at.as_object_mut()
}

/// Whether a member object is a canary Deployment (not a stray of its own name).
pub(crate) fn is_canary(obj: &DynamicObject) -> bool {
    obj.labels().get(CANARY_LABEL).is_some_and(|v| v == "true")
}

#[cfg(test)]
#[path = "canary_tests.rs"]
mod tests;
