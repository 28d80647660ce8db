//! Dependencies that follow a workload into Pull clusters. The host holds no member
//! credential there, so a copy is not written but carried: one bundle of side Works per
//! dependency kind, namespace and Pull cluster ([`SideWorks`], type label
//! `<plural>.dependencies.flotilla.io`), each manifest the copy push mode would create, and
//! the cluster's agent applies it, updates it and prunes it when it leaves the bundle.
//!
//! A copy kept for several workloads (of one or several federated types) is one manifest
//! naming all of them; each owner set is kept here, seeded once per process from the
//! manifest the Works hold, and changed under one lock together with the queued write, so
//! two workloads taking or letting go of a copy at once never lose each other. Each manifest
//! lets the agent write over copies only (`adoptLabel`: [`DEPENDENCY_LABEL`]): a user's own
//! object of the name is left alone and reported `AlreadyExists`, which comes back as push
//! mode's refusal (`ExistsInMember`); any other member refusal as a failure. A refused
//! copy is never reported held, so [`PullDependencies::sweep`] lets go of it when no plan
//! does. A copy whose object a Federated&lt;Kind&gt; now propagates explicitly is handed
//! over: released by the agent (unlabelled, forgotten, not pruned), then dropped from the
//! bundle — never two Works applying one object. Neither a copy's content nor the agent's
//! report of it is logged.

use flotilla_api::dependency_plan::DependencyStatus;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
};

use flotilla_api::{
    ClusterReason, MANAGED_LABEL,
    work::{APPLIED, ManifestConfig, RELEASED, Work, identify},
};
use flotilla_core::{
    dependencies::{
        self as deps, DEPENDENCY_LABEL, Dependency, DependencyKind, EnsureOp, Holder,
        OWNERS_ANNOTATION,
    },
    dependency_plan::{Lookup, Pair, PairOutcome, previous_pairs},
    member::HASH_ANNOTATION,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{
    Key,
    bundles::{Change, Entry},
    dependency_hosts::Referrer,
    side_works::{SideWorks, side_resource},
};

/// One copy in one Pull cluster: (cluster, kind, namespace, name).
type SlotKey = (String, DependencyKind, String, String);

/// What this process knows of one copy: the workloads keeping it and its last manifest.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Slot {
    owners: BTreeSet<String>,
    manifest: Option<Value>,
}

/// The dependency copies of every Pull cluster.
pub(crate) struct PullDependencies {
    kinds: HashMap<DependencyKind, SideWorks>,
    slots: Mutex<HashMap<SlotKey, Slot>>,
}

impl PullDependencies {
    /// `requeue`: where the workloads go whose copy the agent reported anew (a refusal
    /// arriving after the workload's round said the copy was placed, a release).
    pub(crate) fn new(host: Client, requeue: broadcast::Sender<Referrer>) -> Self {
        let kinds = (DependencyKind::ALL.into_iter())
            .map(|kind| {
                let target = side_resource("dependencies", kind.as_str(), kind.plural());
                let seen = Mutex::new(Reports::default());
                let requeue = requeue.clone();
                let on_change = Arc::new(move |w: &Work| {
                    let owners = news(&mut seen.lock().unwrap_or_else(|e| e.into_inner()), w);
                    owners.into_iter().for_each(|o| drop(requeue.send(o)));
                });
                (kind, SideWorks::new(host.clone(), target, false, on_change))
            })
            .collect();
        PullDependencies {
            kinds,
            slots: Mutex::default(),
        }
    }

    /// Makes `cluster`'s bundle carry `host`'s copy of `dep` for `owner`.
    pub(crate) async fn ensure(
        &self,
        cluster: &str,
        ns: &str,
        dep: &Dependency,
        host: &Value,
        owner: &str,
    ) -> PairOutcome {
        let Some((side, bundler)) = self.ready(dep.kind).await else {
            return PairOutcome::Failed(NOT_LISTED.into());
        };
        let key: Key = (Some(ns.to_owned()), dep.name.clone());
        let hash = {
            let mut slots = self.lock();
            let slot = self.slot(&mut slots, side, cluster, ns, dep);
            let Some(manifest) = ensure_slot(slot, dep.kind, host, owner) else {
                return PairOutcome::Failed("the host object cannot be copied".into());
            };
            let hash = desired_hash(&manifest);
            bundler.change(
                cluster,
                &key,
                Change::Upsert(Box::new(entry(&key, manifest))),
                None,
            );
            hash
        };
        if let Some(message) = bundler.failure(cluster, &key) {
            return PairOutcome::Failed(message);
        }
        (side.find(cluster, &key))
            .and_then(|(w, i)| refusal(&w, i, hash.as_deref()))
            .unwrap_or(PairOutcome::Placed)
    }

    /// Lets `owner` go of `cluster`'s copy of `dep`: the copy leaves the bundle (the agent
    /// prunes it) once no workload keeps it.
    pub(crate) async fn release(
        &self,
        cluster: &str,
        ns: &str,
        dep: &Dependency,
        owner: &str,
    ) -> PairOutcome {
        let Some((side, bundler)) = self.ready(dep.kind).await else {
            return PairOutcome::ReleaseFailed(NOT_LISTED.into());
        };
        let key: Key = (Some(ns.to_owned()), dep.name.clone());
        {
            let mut slots = self.lock();
            let slot = self.slot(&mut slots, side, cluster, ns, dep);
            let change = match release_slot(slot, owner) {
                Released::Remove => Change::Remove,
                Released::Keep(manifest) => Change::Upsert(Box::new(entry(&key, manifest))),
                Released::Nothing => return PairOutcome::Released,
            };
            bundler.change(cluster, &key, change, None);
        }
        match bundler.failure(cluster, &key) {
            Some(message) => PairOutcome::ReleaseFailed(message),
            None => PairOutcome::Released,
        }
    }

    /// A Federated&lt;Kind&gt; propagates `dep` explicitly: `cluster`'s copy, if any, is
    /// handed over (released by the agent, then out of the bundle). Whether a hand-over is
    /// still under way (look again later).
    pub(crate) async fn hand_over(&self, cluster: &str, ns: &str, dep: &Dependency) -> bool {
        let Some((side, bundler)) = self.ready(dep.kind).await else {
            return false;
        };
        let key: Key = (Some(ns.to_owned()), dep.name.clone());
        let mut slots = self.lock();
        let slot = self.slot(&mut slots, side, cluster, ns, dep);
        let held = side.find(cluster, &key);
        let step = hand_over_step(held.as_ref().map(|(w, i)| (&**w, *i)));
        *slot = Slot::default();
        match step {
            HandOver::Done => false,
            HandOver::Release(entry) => {
                bundler.change(cluster, &key, Change::Upsert(entry), None);
                true
            }
            HandOver::Waiting => true,
            HandOver::Drop => {
                bundler.change(cluster, &key, Change::Remove, None);
                false
            }
        }
    }

    /// Lets `owner` go of the copies its workload's plan did not touch (`pairs`,
    /// [`unplanned`]) that `cluster`'s bundle still carries for it: a copy the agent
    /// refused is never reported held, so no release plans it. Nothing for the others.
    pub(crate) async fn sweep(
        &self,
        ns: &str,
        owner: &str,
        pairs: Vec<Pair>,
    ) -> Vec<(Pair, PairOutcome)> {
        let mut out = Vec::new();
        for (dep, cluster) in pairs {
            let Some((side, _)) = self.ready(dep.kind).await else {
                continue;
            };
            let key: Key = (Some(ns.to_owned()), dep.name.clone());
            let carried = (side.find(&cluster, &key)).is_some_and(|(w, i)| {
                !w.manifest_config(i).is_some_and(|c| c.orphan)
                    && (w.spec.workload.manifests.get(i))
                        .is_some_and(|m| deps::owners(m).contains(owner))
            });
            if carried {
                let outcome = self.release(&cluster, ns, &dep, owner).await;
                out.push(((dep, cluster), outcome));
            }
        }
        out
    }

    async fn ready(&self, kind: DependencyKind) -> Option<(&SideWorks, &super::bundles::Bundler)> {
        let side = self.kinds.get(&kind)?;
        Some((side, side.ready().await?))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SlotKey, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot of a copy, seeded from the Works the first time this process touches it.
    fn slot<'m>(
        &self,
        slots: &'m mut HashMap<SlotKey, Slot>,
        side: &SideWorks,
        cluster: &str,
        ns: &str,
        dep: &Dependency,
    ) -> &'m mut Slot {
        let id = (
            cluster.to_owned(),
            dep.kind,
            ns.to_owned(),
            dep.name.clone(),
        );
        slots.entry(id).or_insert_with(|| {
            let key = (Some(ns.to_owned()), dep.name.clone());
            // A copy being handed over is no longer kept for anyone.
            let held = (side.find(cluster, &key))
                .filter(|(w, i)| !w.manifest_config(*i).is_some_and(|c| c.orphan));
            seed(held.and_then(|(w, i)| w.spec.workload.manifests.get(i).cloned()))
        })
    }
}

/// The (dependency, Pull cluster) pairs no plan touched whose copy a bundle may still carry
/// for the workload: each dependency it names or named (but an explicitly federated one,
/// handed over instead) in each Pull cluster, but those the round ensured or released
/// (`done`) and those reported held (kept by the plan).
pub(crate) fn unplanned(
    previous: &[DependencyStatus],
    wanted: &BTreeMap<Dependency, Lookup>,
    pull: &[&str],
    done: &BTreeSet<Pair>,
) -> Vec<Pair> {
    let held = previous_pairs(previous);
    let named = (previous.iter())
        .filter_map(|p| {
            let kind = DependencyKind::parse(&p.kind)?;
            Some(Dependency {
                kind,
                name: p.name.clone(),
            })
        })
        .chain(wanted.keys().cloned())
        .filter(|d| wanted.get(d) != Some(&Lookup::Explicit))
        .collect::<BTreeSet<_>>();
    let pairs = named
        .into_iter()
        .flat_map(|d| pull.iter().map(move |c| (d.clone(), (*c).to_owned())));
    pairs
        .filter(|p| !done.contains(p) && !held.contains(p))
        .collect()
}

const NOT_LISTED: &str =
    "the host's cache of the Pull cluster's dependency Works has not listed yet";

/// A slot as a bundle holds its copy (`None`: no copy).
pub(crate) fn seed(manifest: Option<Value>) -> Slot {
    Slot {
        owners: manifest.as_ref().map(deps::owners).unwrap_or_default(),
        manifest,
    }
}

/// Adds `owner` and `host`'s current content to the slot; the manifest to carry.
pub(crate) fn ensure_slot(
    slot: &mut Slot,
    kind: DependencyKind,
    host: &Value,
    owner: &str,
) -> Option<Value> {
    slot.owners.insert(owner.to_owned());
    let manifest = pull_copy(kind, host, &slot.owners)?;
    slot.manifest = Some(manifest.clone());
    Some(manifest)
}

/// What letting go of a copy leaves.
#[derive(Debug, PartialEq)]
pub(crate) enum Released {
    /// No workload keeps it: out of the bundle.
    Remove,
    /// Others keep it: this manifest, without the owner.
    Keep(Value),
    /// The owner held no part of it.
    Nothing,
}

/// Takes `owner` out of the slot.
pub(crate) fn release_slot(slot: &mut Slot, owner: &str) -> Released {
    let had = slot.owners.remove(owner);
    if slot.owners.is_empty() {
        slot.manifest = None;
        return Released::Remove;
    }
    match (&slot.manifest, had) {
        (Some(m), true) => {
            let next = with_owners(m.clone(), &slot.owners);
            slot.manifest = Some(next.clone());
            Released::Keep(next)
        }
        _ => Released::Nothing,
    }
}

/// The manifest of `host`'s copy kept for `owners`: push mode's copy, labelled
/// `kubefed.io/managed=true` (the agent prunes only what carries it) and hashed (the agent
/// does not rewrite a current copy).
pub(crate) fn pull_copy(
    kind: DependencyKind,
    host: &Value,
    owners: &BTreeSet<String>,
) -> Option<Value> {
    let first = owners.iter().next()?;
    let EnsureOp::Create(mut manifest) = deps::ensure_op(kind, host, None, first) else {
        return None;
    };
    manifest["metadata"]["labels"][MANAGED_LABEL] = json!("true");
    Some(with_owners(manifest, owners))
}

/// `manifest` naming `owners`, with the hash of that content.
fn with_owners(mut manifest: Value, owners: &BTreeSet<String>) -> Value {
    let names: Vec<&str> = owners.iter().map(String::as_str).collect();
    manifest["metadata"]["annotations"][OWNERS_ANNOTATION] = json!(names.join(","));
    if let Some(a) = (manifest.pointer_mut("/metadata/annotations")).and_then(Value::as_object_mut)
    {
        a.remove(HASH_ANNOTATION);
    }
    let hash = flotilla_api::hash::content_hash(&manifest);
    manifest["metadata"]["annotations"][HASH_ANNOTATION] = json!(hash);
    manifest
}

fn desired_hash(manifest: &Value) -> Option<String> {
    flotilla_core::member::recorded_hash(manifest).map(str::to_owned)
}

/// A copy's entry in its bundle (its source: the copied object itself). The agent writes
/// over no member object but a copy ([`DEPENDENCY_LABEL`]): a user's own is left alone and
/// reported, as push mode refuses it.
pub(crate) fn entry(key: &Key, manifest: Value) -> Entry {
    Entry {
        config: ManifestConfig {
            identifier: identify(0, &manifest),
            source_namespace: key.0.clone(),
            source_name: key.1.clone(),
            adopt_label: Some(DEPENDENCY_LABEL.to_owned()),
            ..ManifestConfig::default()
        },
        manifest,
    }
}

/// The next step of handing a copy over to an explicit Federated&lt;Kind&gt;.
#[derive(Debug, PartialEq)]
pub(crate) enum HandOver {
    /// No copy in the bundle.
    Done,
    /// Mark the copy for release (the agent unlabels and forgets it, prunes nothing).
    Release(Box<Entry>),
    /// Marked; the agent has not reported it released yet.
    Waiting,
    /// Released: drop it from the bundle.
    Drop,
}

/// The hand-over step for the copy manifest `ordinal` of a Work (`None`: none).
pub(crate) fn hand_over_step(held: Option<(&Work, usize)>) -> HandOver {
    let Some((work, ordinal)) = held else {
        return HandOver::Done;
    };
    let (Some(config), Some(manifest)) = (
        work.manifest_config(ordinal),
        work.spec.workload.manifests.get(ordinal),
    ) else {
        return HandOver::Done;
    };
    if !config.orphan {
        let mut config = config.clone();
        config.orphan = true;
        config.identifier = identify(0, manifest);
        let manifest = manifest.clone();
        return HandOver::Release(Box::new(Entry { manifest, config }));
    }
    let released = (work.manifest_report(ordinal))
        .and_then(|m| m.conditions.iter().find(|c| c.type_ == APPLIED))
        .is_some_and(|c| c.reason == RELEASED && c.observed_generation == work.metadata.generation);
    if released {
        HandOver::Drop
    } else {
        HandOver::Waiting
    }
}

/// The member's refusal of manifest `ordinal`, when the agent reported one on the Work's
/// current generation for the content `hash`: an object not made by Flotilla holding the
/// name ([`ClusterReason::AlreadyExists`]) is push mode's refusal, any other a failure.
pub(crate) fn refusal(work: &Work, ordinal: usize, hash: Option<&str>) -> Option<PairOutcome> {
    let report = work.manifest_report(ordinal)?;
    let applied = report.conditions.iter().find(|c| c.type_ == APPLIED)?;
    let current =
        applied.observed_generation == work.metadata.generation && report.hash.as_deref() == hash;
    if !current || applied.status == "True" {
        return None;
    }
    Some(if applied.reason == ClusterReason::AlreadyExists.as_str() {
        PairOutcome::Refused(Holder::Foreign)
    } else {
        PairOutcome::Failed(applied.message.clone())
    })
}

/// What the agent last said of one copy, as far as a workload's round reads it: its
/// `Applied` status and reason, whether on the Work's current generation (only while that
/// is news — a refusal, a release: as the bundle index reads reports, a rewrite of the
/// bundle for another copy moves every report's generation, and an applied copy is no
/// news for its workloads), and the content hash it applied.
type Said = Option<(String, String, bool, Option<String>)>;

/// What the agent said of each copy, by Work (namespace, name) and the copy's source key.
pub(crate) type Reports = HashMap<(String, String), BTreeMap<Key, Said>>;

/// The workloads to requeue for a change of `work`: the owners of each copy whose report
/// differs from what `seen` holds for it (which then holds the new reports).
pub(crate) fn news(seen: &mut Reports, work: &Work) -> Vec<Referrer> {
    let id = (work.namespace().unwrap_or_default(), work.name_any());
    let previous = seen.remove(&id).unwrap_or_default();
    let mut now = BTreeMap::new();
    let mut owners = Vec::new();
    for (ordinal, config) in work.spec.manifest_configs.iter().enumerate() {
        let key = (config.source_namespace.clone(), config.source_name.clone());
        let said = work.manifest_report(ordinal).and_then(|m| {
            let applied = m.conditions.iter().find(|c| c.type_ == APPLIED)?;
            let plain = applied.status == "True" && applied.reason == APPLIED;
            let current = !plain && applied.observed_generation == work.metadata.generation;
            Some((
                applied.status.clone(),
                applied.reason.clone(),
                current,
                m.hash.clone(),
            ))
        });
        if said.is_some() && previous.get(&key) != Some(&said) {
            let manifest = work.spec.workload.manifests.get(ordinal);
            owners.extend(manifest.into_iter().flat_map(|m| referrers(&key, m)));
        }
        now.insert(key, said);
    }
    seen.insert(id, now);
    owners
}

/// The workloads a copy names as its owners (`FederatedDeployment/web` in its namespace).
fn referrers(key: &Key, manifest: &Value) -> Vec<Referrer> {
    (deps::owners(manifest).into_iter())
        .filter_map(|o| {
            let (kind, name) = o.split_once('/')?;
            Some((kind.to_owned(), (key.0.clone(), name.to_owned())))
        })
        .collect()
}

#[cfg(test)]
#[path = "pull_dependencies_tests.rs"]
mod tests;
