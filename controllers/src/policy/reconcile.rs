//! One native object: which policy wins it, the Federated object that follows (written only
//! when it differs), its namespace's FederatedNamespace, and its status coming home. A
//! decision that cannot be carried out is recorded for the policy's status and told in an
//! Event; nothing already propagated is touched then.

use std::time::Duration;

use flotilla_api::{
    federated::{ClusterOverrides, FederatedSpec, FederatedStatus},
    policy::{ConflictResolution, MATERIALIZED_LABEL, ObjectRef, POLICY_ANNOTATION},
};
use flotilla_core::{
    policy_materialize::{self as mat, NativeOwner},
    policy_override::{self, ClusterView, OverrideSource},
    policy_select::{self, Candidate, ObjectView, PolicyScope},
};
use flotilla_multicluster::runner::Action;
use kube::{
    Api, Resource, ResourceExt,
    api::{DynamicObject, PostParams},
    runtime::{events::EventType, reflector::ObjectRef as StoreRef},
};
use serde_json::Value;
use tracing::{debug, info};

use super::{
    Ctx, Key,
    outcome::{Blocked, Outcome, PolicyId, PolicyKind},
    replicas,
    types::{STATUS_WRITER, TypeView},
    writes,
};

/// How long a key waits for a cache that is still listing.
const LISTING: Duration = Duration::from_secs(1);
/// How often an object blocked by an explicit Federated object looks again.
const BLOCKED_RECHECK: Duration = Duration::from_secs(60);

/// The policy that won an object, and its spec.
pub(super) struct Chosen {
    pub id: PolicyId,
    pub spec: flotilla_api::policy::PropagationSpec,
    pub losers: Vec<PolicyId>,
}

impl Ctx {
    /// Decides one native object; see the module docs.
    pub(super) async fn reconcile(&self, key: &Key) -> Action {
        let Some(t) = self.types.get(&key.0) else {
            self.forget(key);
            return Action::AwaitChange;
        };
        let ns = Some(key.1.as_str()).filter(|n| !n.is_empty());
        let current = t.materialized.get(&store_ref(&key.2, t.fed.clone(), ns));
        let native = match &t.natives {
            Some((_, false)) => return Action::requeue(LISTING),
            Some((store, true)) => store.get(&store_ref(&key.2, t.target.clone(), ns)),
            None => None,
        };
        if !t.materialized_synced {
            return Action::requeue(LISTING);
        }
        let native = native.filter(|n| n.metadata.deletion_timestamp.is_none());
        // Deleted (or being deleted) while its kind is watched: the host's garbage collector
        // deletes the Federated object it owns; a second DELETE would only double the cost.
        let native_gone = t.natives.is_some() && native.is_none();
        // The type's apiVersion and kind, always: an object from a watch's initial list has
        // neither (the API server omits them on list items), one from a watch event both, and
        // the template, the system-object check and the server-field cleanup read them.
        let json = native.as_deref().map(|n| {
            let mut j = serde_json::to_value(n).unwrap_or(Value::Null);
            if let Some(o) = j.as_object_mut() {
                o.insert("apiVersion".into(), t.target.api_version.clone().into());
                o.insert("kind".into(), t.target.kind.clone().into());
            }
            j
        });
        let chosen = match (&native, &json) {
            (Some(n), Some(j)) if !policy_select::is_system_object(j, &self.namespace) => {
                self.choose(&t, n)
            }
            _ => None,
        };
        let (Some(native), Some(json), Some(chosen)) = (native, json, chosen) else {
            self.forget(key);
            if !native_gone && let Some(ns) = ns {
                // Gone natives take their RSP along (it is theirs); released ones do not.
                replicas::release(self, ns, &key.2).await;
            }
            return match current {
                Some(cur) if !native_gone => writes::release(self, &t, &cur).await,
                _ => Action::AwaitChange,
            };
        };
        self.propagate(key, &t, &native, &json, chosen, current.as_deref())
            .await
    }

    /// The winning propagation policy of `native`, if any.
    fn choose(&self, t: &TypeView, native: &DynamicObject) -> Option<Chosen> {
        let pp = self.policies.propagation.state();
        let cpp = self.policies.cluster_propagation.state();
        let created = |m: &kube::core::ObjectMeta| {
            m.creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default()
        };
        // One entry per live policy: its id, spec and creation time, in one list so the
        // three can never fall out of step.
        let mut live: Vec<(PolicyId, &flotilla_api::policy::PropagationSpec, String)> = Vec::new();
        for p in pp
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let id = PolicyId {
                kind: PolicyKind::Propagation,
                namespace: p.namespace(),
                name: p.name_any(),
            };
            live.push((id, &p.spec, created(&p.metadata)));
        }
        for p in cpp
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let id = PolicyId {
                kind: PolicyKind::ClusterPropagation,
                namespace: None,
                name: p.name_any(),
            };
            live.push((id, &p.spec.spec, created(&p.metadata)));
        }
        let cands: Vec<Candidate<'_>> = live
            .iter()
            .map(|(id, spec, stamp)| Candidate {
                scope: scope_of(id.kind),
                namespace: id.namespace.as_deref(),
                name: &id.name,
                priority: spec.priority,
                created: stamp,
                selectors: &spec.resource_selectors,
            })
            .collect();
        let (labels, annotations) = (native.labels().clone(), native.annotations().clone());
        let view = object_view(t, native, &labels, &annotations);
        let (winner, losers) = policy_select::choose(&cands, &view)?;
        Some(Chosen {
            id: live[winner].0.clone(),
            spec: live[winner].1.clone(),
            losers: losers.into_iter().map(|i| live[i].0.clone()).collect(),
        })
    }

    async fn propagate(
        &self,
        key: &Key,
        t: &TypeView,
        native: &DynamicObject,
        json: &Value,
        chosen: Chosen,
        current: Option<&DynamicObject>,
    ) -> Action {
        let mut outcome = Outcome {
            object: object_ref(t, native),
            winner: Some(chosen.id.clone()),
            losers: chosen.losers.clone(),
            ..Default::default()
        };
        if let Some(writer) = native.annotations().get(STATUS_WRITER)
            && !chosen.spec.allow_running_in_host
        {
            let msg = format!(
                "the host runs {} {} itself ({writer} writes its status): run the host without that controller (docs/policies.md), or set allowRunningInHost",
                t.target.kind,
                native.name_any()
            );
            return self
                .blocked(
                    t,
                    key,
                    native,
                    outcome,
                    Blocked::HostRunsWorkload,
                    msg,
                    None,
                )
                .await;
        }
        let overrides = match self.overrides(t, native, json, &chosen.spec, &mut outcome) {
            Ok(o) => o,
            Err(msg) => {
                self.record(key, outcome);
                self.event(t, native, EventType::Warning, "InvalidOverride", msg)
                    .await;
                return Action::AwaitChange;
            }
        };
        let mut spec = mat::federated_spec(json, &chosen.spec, overrides);
        if self.divided_by_rsp(t, native)
            && let Some(Ok(cur)) = current.map(FederatedSpec::from_dynamic)
        {
            spec = flotilla_core::replica_division::keep_division(spec, &cur);
        }
        let uid = native.uid().unwrap_or_default();
        let api_version = t.target.api_version.clone();
        let owner = NativeOwner {
            api_version: &api_version,
            kind: &t.target.kind,
            name: &key.2,
            uid: &uid,
        };
        let policy_ref = mat::policy_ref(
            scope_of(chosen.id.kind),
            chosen.id.namespace.as_deref(),
            &chosen.id.name,
        );
        let ns = native.namespace();
        let desired = mat::federated_object(
            &t.spec.federated_type,
            &key.2,
            ns.as_deref(),
            &owner,
            &policy_ref,
            &chosen.spec,
            &spec,
        );
        let current_json = current.map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
        let wrote = mat::needs_write(&desired, current_json.as_ref());
        if wrote {
            let take_over = chosen.spec.conflict_resolution == Some(ConflictResolution::Overwrite);
            match writes::write_federated(self, t, key, &desired, current, take_over).await {
                writes::Written::Done => {
                    info!(object = ?key, policy = %chosen.id, "federated object written")
                }
                writes::Written::TookOver => {
                    let msg = format!(
                        "{} {} is propagated by {} now (conflictResolution: Overwrite)",
                        t.fed.kind, key.2, chosen.id
                    );
                    info!(object = ?key, policy = %chosen.id, "federated object taken over");
                    self.event(t, native, EventType::Normal, "TookOver", msg)
                        .await;
                }
                writes::Written::Explicit(msg) => {
                    return self
                        .blocked(
                            t,
                            key,
                            native,
                            outcome,
                            Blocked::ExplicitFederatedObject,
                            msg,
                            Some(BLOCKED_RECHECK),
                        )
                        .await;
                }
                writes::Written::Failed => {
                    self.record(key, outcome);
                    return Action::backoff();
                }
            }
        }
        self.record(key, outcome);
        if let Some(ns) = ns.as_deref()
            && t.spec.target_type.namespaced()
        {
            writes::ensure_namespace(self, ns).await;
        }
        let replicas =
            replicas::ensure(self, t, native, json, &owner, &policy_ref, &chosen.spec).await;
        let status = current
            .map(FederatedStatus::from_dynamic)
            .unwrap_or_default();
        // Just written: the cached Federated object (and its status) is the old one.
        let caught_up = !wrote && current_json.as_ref().is_some_and(mat::fleet_caught_up);
        match writes::status_home(self, t, native, &status, caught_up).await {
            Action::AwaitChange => replicas,
            other => other,
        }
    }

    /// Whether a ReplicaSchedulingPreference of `native`'s name divides its replicas.
    fn divided_by_rsp(&self, t: &TypeView, native: &DynamicObject) -> bool {
        let Some(ns) = native.namespace() else {
            return false;
        };
        let r = StoreRef::<flotilla_api::ReplicaSchedulingPreference>::new(&native.name_any())
            .within(&ns);
        self.rsps
            .get(&r)
            .is_some_and(|rsp| rsp.spec.target_kind == t.fed.kind)
    }

    /// An RSP changed: its target, when a policy made it, is decided again (so that its
    /// division is kept, or dropped once the RSP is gone).
    pub(super) fn rsp_changed(&self, rsp: &flotilla_api::ReplicaSchedulingPreference) {
        let ns = rsp.namespace().unwrap_or_default();
        for (ftc, _, _) in self.types.targets() {
            if self
                .types
                .get(&ftc)
                .is_some_and(|t| t.fed.kind == rsp.spec.target_kind)
            {
                self.queue.add((ftc, ns.clone(), rsp.name_any()));
            }
        }
    }

    /// Every cluster's overrides from the override policies that apply to `native`. An
    /// override that fails is recorded against its policy and nothing is written.
    fn overrides(
        &self,
        t: &TypeView,
        native: &DynamicObject,
        json: &Value,
        policy: &flotilla_api::policy::PropagationSpec,
        outcome: &mut Outcome,
    ) -> Result<Vec<ClusterOverrides>, String> {
        let ops = self.policies.overrides.state();
        let cops = self.policies.cluster_overrides.state();
        let mut ids = Vec::new();
        let mut sources = Vec::new();
        for p in ops.iter() {
            ids.push(PolicyId {
                kind: PolicyKind::Override,
                namespace: p.namespace(),
                name: p.name_any(),
            });
            sources.push(&p.spec);
        }
        for p in cops.iter() {
            ids.push(PolicyId {
                kind: PolicyKind::ClusterOverride,
                namespace: None,
                name: p.name_any(),
            });
            sources.push(&p.spec.spec);
        }
        let all: Vec<OverrideSource<'_>> = ids
            .iter()
            .zip(&sources)
            .map(|(id, s)| OverrideSource {
                scope: scope_of(id.kind),
                namespace: id.namespace.as_deref(),
                name: &id.name,
                selectors: &s.resource_selectors,
                rules: &s.override_rules,
            })
            .collect();
        let (labels, annotations) = (native.labels().clone(), native.annotations().clone());
        let applicable =
            policy_override::applicable(&all, &object_view(t, native, &labels, &annotations));
        if applicable.is_empty() {
            return Ok(Vec::new());
        }
        let id_of = |s: &OverrideSource<'_>| PolicyId {
            kind: match s.scope {
                PolicyScope::Namespaced => PolicyKind::Override,
                PolicyScope::Cluster => PolicyKind::ClusterOverride,
            },
            namespace: s.namespace.map(str::to_string),
            name: s.name.to_string(),
        };
        outcome.overridden_by = applicable.iter().map(id_of).collect();
        let bare = FederatedSpec {
            overrides: Vec::new(),
            ..mat::federated_spec(json, policy, Vec::new())
        };
        let ns = native.namespace();
        let mut out = Vec::new();
        let mut clusters = self.clusters.snapshot();
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        for c in &clusters {
            let base = flotilla_core::desired::compute(
                &t.spec.target_type,
                &native.name_any(),
                ns.as_deref(),
                &bare,
                &c.name,
                None,
            )
            .map_err(|e| e.to_string())?
            .object;
            let view = ClusterView {
                name: &c.name,
                labels: &c.labels,
            };
            match policy_override::cluster_overrides(&base, &applicable, &view) {
                Ok(ops) if ops.is_empty() => {}
                Ok(ops) => out.push(ClusterOverrides {
                    cluster_name: c.name.clone(),
                    cluster_overrides: ops,
                }),
                Err(e) => {
                    let failed = applicable
                        .iter()
                        .map(id_of)
                        .find(|id| id.to_string() == e.policy);
                    let msg = e.to_string();
                    outcome
                        .override_errors
                        .extend(failed.map(|id| (id, msg.clone())));
                    return Err(msg);
                }
            }
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)] // each is one fact of the refusal; a struct would only rename them
    async fn blocked(
        &self,
        t: &TypeView,
        key: &Key,
        native: &DynamicObject,
        mut outcome: Outcome,
        why: Blocked,
        msg: String,
        recheck: Option<Duration>,
    ) -> Action {
        debug!(object = ?key, reason = why.as_str(), "policy blocked");
        let changed = self.outcome_of(key).and_then(|o| o.blocked).map(|b| b.0) != Some(why);
        outcome.blocked = Some((why, msg.clone()));
        self.record(key, outcome);
        if changed {
            self.event(t, native, EventType::Warning, why.as_str(), msg)
                .await;
        }
        Action::recheck(recheck)
    }

    pub(super) async fn event(
        &self,
        t: &TypeView,
        native: &DynamicObject,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let reference = native.object_ref(&t.target);
        crate::events::publish(&self.recorder, &reference, type_, reason, "Propagate", note).await;
    }

    fn outcome_of(&self, key: &Key) -> Option<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Keeps `outcome` for the policies' statuses; wakes the status pass when it changed.
    pub(super) fn record(&self, key: &Key, outcome: Outcome) {
        let mut map = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(key) != Some(&outcome) {
            map.insert(key.clone(), outcome);
            self.status_wake.notify_one();
        }
    }

    /// Drops what was decided about `key` (no policy takes it now).
    pub(super) fn forget(&self, key: &Key) {
        let mut map = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        if map.remove(key).is_some() {
            self.status_wake.notify_one();
        }
    }
}

fn store_ref(name: &str, ar: kube::core::ApiResource, ns: Option<&str>) -> StoreRef<DynamicObject> {
    let r = StoreRef::new_with(name, ar);
    match ns {
        Some(ns) => r.within(ns),
        None => r,
    }
}

fn scope_of(kind: PolicyKind) -> PolicyScope {
    match kind {
        PolicyKind::Propagation | PolicyKind::Override => PolicyScope::Namespaced,
        PolicyKind::ClusterPropagation | PolicyKind::ClusterOverride => PolicyScope::Cluster,
    }
}

fn object_view<'a>(
    t: &'a TypeView,
    native: &'a DynamicObject,
    labels: &'a std::collections::BTreeMap<String, String>,
    annotations: &'a std::collections::BTreeMap<String, String>,
) -> ObjectView<'a> {
    ObjectView {
        group: &t.target.group,
        kind: &t.target.kind,
        namespace: native.metadata.namespace.as_deref(),
        name: native.metadata.name.as_deref().unwrap_or_default(),
        labels,
        annotations,
    }
}

fn object_ref(t: &TypeView, native: &DynamicObject) -> ObjectRef {
    ObjectRef {
        api_version: t.target.api_version.clone(),
        kind: t.target.kind.clone(),
        namespace: native.namespace(),
        name: native.name_any(),
    }
}

/// Whether a Federated object in the host was made by this controller.
pub(super) fn is_materialized(o: &DynamicObject) -> bool {
    o.labels().get(MATERIALIZED_LABEL).map(String::as_str) == Some("true")
        && o.annotations().contains_key(POLICY_ANNOTATION)
}

/// `PostParams` of the controller's creates.
pub(super) fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(flotilla_api::policy::POLICY_FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The host API of a type's Federated objects in `ns`.
pub(super) fn fed_api(ctx: &Ctx, t: &TypeView, ns: Option<&str>) -> Api<DynamicObject> {
    host_api(ctx, &t.fed, ns)
}

/// The host API of `ar`'s objects in `ns` (all namespaces, or cluster-scoped, without).
pub(super) fn host_api(
    ctx: &Ctx,
    ar: &kube::core::ApiResource,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(ctx.host.clone(), ns, ar),
        None => Api::all_with(ctx.host.clone(), ar),
    }
}
