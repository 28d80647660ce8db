//! The agent's writes to its own (member) cluster: resolving a manifest's kind through
//! discovery (cached per kind), reading the member object from the watch caches
//! ([`super::cache`]; live only before a kind's cache is complete), server-side apply with
//! field manager `flotilla-agent`, and pruning an object it applied earlier — checked
//! first, deleted with the recorded UID as a precondition, or only unlabelled for
//! namespaces that must never be deleted and for orphaned Works.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use flotilla_api::{
    ClusterReason, MANAGED_LABEL,
    work::{AGENT_FIELD_MANAGER, AppliedResourceMeta, ResourceIdentifier},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    core::{ApiResource, DynamicObject, GroupVersionKind},
    discovery::{Scope, pinned_kind},
};
use serde_json::{Value, json};
use tracing::info;

use super::cache::{Cached, ObjectCache, object_id};
use super::drift;
use super::plan::{
    Adoption, ManifestOp, ManifestResult, cacheable, check_manifest, decide, manifest_hash,
    may_prune, may_prune_unrecorded,
};
use flotilla_api::drift::DriftState;
use flotilla_core::member::{PROTECTED_NAMESPACES, recorded_hash};

/// A kind the member serves: its resource and whether it is namespaced.
#[derive(Clone)]
struct Resolved {
    ar: ApiResource,
    namespaced: bool,
}

/// The member side of the agent: a client, the kinds resolved so far and the watch caches.
#[derive(Clone)]
pub struct Member {
    client: Client,
    kinds: Arc<Mutex<HashMap<(String, String), Resolved>>>,
    /// Namespaces never deleted (the agent's own, besides the system ones).
    own_namespace: String,
    cache: Arc<ObjectCache>,
    drift: Arc<drift::Memory>,
}

/// What one manifest came to.
pub struct Applied {
    /// The verdict for the Work's status.
    pub result: ManifestResult,
    /// What to record for pruning, when the object exists.
    pub record: Option<AppliedResourceMeta>,
    /// The cache has not shown the agent's own recent write yet: look again soon.
    pub lagging: bool,
    /// The member accepted a server-side apply this round.
    pub wrote: bool,
}

impl Member {
    /// The member seen through `client`; `own_namespace` (where the agent runs) is never
    /// deleted; `cache` holds the member objects.
    pub fn new(client: Client, own_namespace: &str, cache: Arc<ObjectCache>) -> Self {
        Member {
            client,
            kinds: Arc::default(),
            own_namespace: own_namespace.to_owned(),
            cache,
            drift: Arc::default(),
        }
    }

    /// The member's client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Resolved, String> {
        let k = (api_version.to_owned(), kind.to_owned());
        if let Some(r) = self.kinds.lock().unwrap_or_else(|e| e.into_inner()).get(&k) {
            return Ok(r.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| discovery_failure(kind, api_version, &e))?;
        let resolved = Resolved {
            ar,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k, resolved.clone());
        Ok(resolved)
    }

    fn api(&self, r: &Resolved, namespace: &str) -> Api<DynamicObject> {
        if r.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &r.ar)
        } else {
            Api::all_with(self.client.clone(), &r.ar)
        }
    }

    /// Makes one manifest of the Work `work` true in the member; an existing object the
    /// manifest's `adoption` rule does not let it write over is left alone.
    pub async fn apply_manifest(
        &self,
        work: &str,
        ordinal: usize,
        manifest: &Value,
        collect_status: bool,
        cx: &drift::Context<'_>,
        adoption: &Adoption,
    ) -> Applied {
        let mut identifier = identify(ordinal, manifest);
        let mut result = ManifestResult {
            identifier: identifier.clone(),
            result: Ok(()),
            hash: manifest_hash(manifest).map(str::to_owned),
            generation: None,
            status: None,
            drift: cx.previous.cloned(),
            member_reason: None,
            released: false,
        };
        let failed = |mut result: ManifestResult, reason, msg| {
            result.result = Err((reason, msg));
            Applied {
                result,
                record: None,
                lagging: false,
                wrote: false,
            }
        };
        if let Err(msg) = check_manifest(manifest) {
            return failed(result, ClusterReason::CreationFailed, msg);
        }
        let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
        let resolved = match self.resolve(api_version, &identifier.kind).await {
            Ok(r) => r,
            Err(msg) => return failed(result, ClusterReason::CreationFailed, msg),
        };
        identifier.resource = resolved.ar.plural.clone();
        result.identifier = identifier.clone();
        let id = object_id(&resolved.ar, &identifier.namespace, &identifier.name);
        let (live, lagging) = match self.read(&resolved, &id, manifest, adoption).await {
            Ok(read) => read,
            Err((member_reason, msg)) => {
                result.member_reason = member_reason;
                return failed(result, ClusterReason::RetrievalFailed, msg);
            }
        };
        // Another's object of the manifest's name is neither written nor recorded (so never
        // pruned).
        if let Some(ManifestOp::Refuse(reason, msg)) =
            live.as_ref().and_then(|l| adoption.refusal(l))
        {
            return failed(result, reason, msg);
        }
        let (current, wrote) = match self
            .make_true(&resolved, &id, manifest, live, cx, &mut result)
            .await
        {
            Ok(done) => done,
            Err((reason, msg)) => return failed(result, reason, msg),
        };
        if current.is_some() {
            self.cache.own(id, work);
        }
        let record = current.as_ref().map(|obj| AppliedResourceMeta {
            identifier: identifier.clone(),
            uid: obj["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
        if let Some(obj) = &current {
            result.generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
            if collect_status {
                result.status = obj.get("status").filter(|s| !s.is_null()).cloned();
            }
        }
        Applied {
            result,
            record,
            lagging,
            wrote,
        }
    }

    /// Releases the member object of a manifest marked for orphaning: unlabelled (when it
    /// is still Flotilla's), left in place and forgotten; reported as released. Nothing is
    /// recorded for it, so dropping the manifest afterwards prunes nothing.
    pub async fn release(&self, ordinal: usize, manifest: &Value) -> Applied {
        let mut result = ManifestResult {
            identifier: identify(ordinal, manifest),
            result: Ok(()),
            hash: manifest_hash(manifest).map(str::to_owned),
            generation: None,
            status: None,
            drift: None,
            member_reason: None,
            released: true,
        };
        let mut wrote = false;
        let outcome = async {
            check_manifest(manifest)?;
            let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
            let resolved = self.resolve(api_version, &result.identifier.kind).await?;
            result.identifier.resource = resolved.ar.plural.clone();
            let id = &result.identifier;
            let oid = object_id(&resolved.ar, &id.namespace, &id.name);
            let (live, _) = self
                .read(&resolved, &oid, manifest, &Adoption::default())
                .await
                .map_err(|r| r.1)?;
            self.cache.disown(&oid);
            self.drift.forget(&oid);
            let managed = live.as_ref().and_then(|l| {
                l.pointer(&format!(
                    "/metadata/labels/{}",
                    MANAGED_LABEL.replace('/', "~1")
                ))
            });
            if managed.and_then(Value::as_str) != Some("true") {
                return Ok(());
            }
            let api = self.api(&resolved, &id.namespace);
            let live = live.unwrap_or(Value::Null);
            wrote = true;
            self.remove(&api, id, &live, true).await
        }
        .await;
        if let Err(msg) = outcome {
            result.released = false;
            result.result = Err((ClusterReason::DeletionFailed, msg));
        }
        Applied {
            result,
            record: None,
            lagging: false,
            wrote,
        }
    }

    /// Decides on one manifest given the live member object (drift included) and writes
    /// it when needed: the member object afterwards, or why it is left alone. A failed
    /// write is reported in `result` and the live object kept; the drift entry is set.
    async fn make_true(
        &self,
        resolved: &Resolved,
        id: &super::cache::ObjectId,
        manifest: &Value,
        live: Option<Value>,
        cx: &drift::Context<'_>,
        result: &mut ManifestResult,
    ) -> Result<(Option<Value>, bool), (ClusterReason, String)> {
        let version = live
            .as_ref()
            .and_then(|l| l.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let now = k8s_openapi::jiff::Timestamp::now();
        let judged = drift::judge(
            decide(manifest, live.as_ref()),
            manifest,
            live.as_ref(),
            self.drift.awaits_repair(id, version.as_deref()),
            &self.drift.history(id),
            cx,
            now.as_second(),
        );
        let mut wrote = false;
        let current = match judged.op {
            ManifestOp::Nothing => live,
            ManifestOp::Refuse(reason, msg) => return Err((reason, msg)),
            ManifestOp::Apply => {
                // Fields the policy leaves to another writer keep the member's values.
                let body = match &live {
                    Some(l) => cx.policy.keep_ignored(manifest.clone(), l),
                    None => manifest.clone(),
                };
                match self.write(resolved, id, &body).await {
                    Ok(obj) => {
                        wrote = true;
                        Some(obj)
                    }
                    Err((member_reason, msg)) => {
                        result.member_reason = member_reason;
                        let reason = if live.is_some() {
                            ClusterReason::UpdateFailed
                        } else {
                            ClusterReason::CreationFailed
                        };
                        result.result = Err((reason, msg));
                        live
                    }
                }
            }
        };
        let repaired = judged.op == ManifestOp::Apply && result.result.is_ok();
        if let Some(f) = &judged.finding
            && f.state == DriftState::Repaired
            && repaired
        {
            self.drift
                .repaired(id, f, version.as_deref(), now.as_second());
        }
        result.drift = drift::entry(judged.finding.as_ref(), repaired, cx, &now.to_string());
        Ok((current, wrote))
    }

    /// The member object of a manifest: from the kind's watch cache once it is complete
    /// (starting the watch on first use), live before that or for an unlabelled manifest.
    /// An object absent from the cache is read live when `adoption` restricts what may be
    /// written over: the caches hold only labelled objects, not a user's own.
    async fn read(
        &self,
        resolved: &Resolved,
        id: &super::cache::ObjectId,
        manifest: &Value,
        adoption: &Adoption,
    ) -> Result<(Option<Value>, bool), Refusal> {
        let mut unshown = false;
        if cacheable(manifest) {
            self.cache.ensure(&resolved.ar);
            match self.cache.lookup(&resolved.ar, id, manifest_hash(manifest)) {
                Cached::Known { object, lagging } if object.is_some() || !adoption.restricted() => {
                    return Ok((object, lagging));
                }
                Cached::Unshown => unshown = true,
                Cached::Known { .. } | Cached::Unknown => {}
            }
        }
        let api = self.api(resolved, &id.2);
        match api.get_opt(&id.3).await {
            Ok(live) => {
                let live = live.map(|mut o| {
                    // As the watch caches keep it: the digest, not the whole list.
                    drift::keep_digest(&mut o);
                    o.metadata.managed_fields = None;
                    serde_json::to_value(o).unwrap_or(Value::Null)
                });
                let hash = manifest_hash(manifest);
                if unshown
                    && let Some(o) = &live
                    && hash.is_some()
                    && recorded_hash(o) == hash
                {
                    // The member holds this manifest (the agent's own write its lagging
                    // cache never showed): it stands in again, so the next rounds read
                    // neither the stale cache nor the member.
                    self.cache.remember_write(id.clone(), hash, o.clone());
                }
                Ok((live, false))
            }
            Err(e) => Err(refusal(&e)),
        }
    }

    /// Server-side apply of the manifest; the object the member returned.
    async fn write(
        &self,
        resolved: &Resolved,
        id: &super::cache::ObjectId,
        manifest: &Value,
    ) -> Result<Value, Refusal> {
        let api = self.api(resolved, &id.2);
        let pp = PatchParams::apply(AGENT_FIELD_MANAGER).force();
        match api.patch(&id.3, &pp, &Patch::Apply(manifest)).await {
            Ok(o) => {
                let hash = manifest_hash(manifest);
                let logged = hash.unwrap_or_default();
                info!(resource = %id.1, namespace = %id.2, name = %id.3, hash = logged, "applied");
                let obj = serde_json::to_value(o).unwrap_or(Value::Null);
                self.cache.remember_write(id.clone(), hash, obj.clone());
                Ok(obj)
            }
            Err(e) => {
                self.cache.remember_write(id.clone(), None, Value::Null);
                Err(refusal(&e))
            }
        }
    }

    /// Removes an object applied earlier that left the inventory: `Ok(())` once it is gone
    /// (or no longer Flotilla's); `orphan` only unlabels it.
    pub async fn prune(&self, applied: &AppliedResourceMeta, orphan: bool) -> Result<(), String> {
        let id = &applied.identifier;
        let api_version = if id.group.is_empty() {
            id.version.clone()
        } else {
            format!("{}/{}", id.group, id.version)
        };
        let resolved = self.resolve(&api_version, &id.kind).await?;
        let api = self.api(&resolved, &id.namespace);
        let oid = object_id(&resolved.ar, &id.namespace, &id.name);
        let live = match self.cache.lookup(&resolved.ar, &oid, None) {
            Cached::Known {
                object: Some(o), ..
            } => Some(o),
            // Absent from a cache that may lag (its watch down since a member API server
            // restart, the agent's own write older than it trusts): confirmed live before
            // the object is taken for gone. A rare path: an object is normally pruned while
            // present.
            Cached::Known { object: None, .. } | Cached::Unknown | Cached::Unshown => {
                live_object(&api, &id.name).await.map_err(|e| message(&e))?
            }
        };
        self.cache.disown(&oid);
        self.drift.forget(&oid);
        let Some(live) = live else {
            return Ok(());
        };
        if !may_prune(&applied.uid, &live) {
            return Ok(());
        }
        self.remove(&api, id, &live, orphan).await
    }

    /// Removes an object a Work's record named when it was created but never listed as
    /// applied ([`super::plan::unrecorded`]): read live (with the writers the API server
    /// recorded), removed as [`Member::prune`] does only if the agent wrote it and it is
    /// still Flotilla's. A kind the member does not serve or lets the agent read cannot
    /// hold an object the agent applied.
    pub async fn prune_unrecorded(
        &self,
        id: &ResourceIdentifier,
        orphan: bool,
    ) -> Result<(), String> {
        let api_version = if id.group.is_empty() {
            id.version.clone()
        } else {
            format!("{}/{}", id.group, id.version)
        };
        let Ok(resolved) = self.resolve(&api_version, &id.kind).await else {
            return Ok(());
        };
        let api = self.api(&resolved, &id.namespace);
        let live = match live_object(&api, &id.name).await {
            Ok(live) => live,
            Err(kube::Error::Api(s)) if s.code == 403 => None,
            Err(e) => return Err(message(&e)),
        };
        match live {
            Some(live) if may_prune_unrecorded(&live) => {
                let oid = object_id(&resolved.ar, &id.namespace, &id.name);
                self.cache.disown(&oid);
                self.drift.forget(&oid);
                info!(kind = %id.kind, namespace = %id.namespace, name = %id.name, "an object applied but never recorded");
                self.remove(&api, id, &live, orphan).await
            }
            _ => Ok(()),
        }
    }

    /// Deletes `live` (with its UID as a precondition), or only unlabels it when `orphan`
    /// or a namespace never deleted.
    async fn remove(
        &self,
        api: &Api<DynamicObject>,
        id: &ResourceIdentifier,
        live: &Value,
        orphan: bool,
    ) -> Result<(), String> {
        let protected = id.group.is_empty()
            && id.kind == "Namespace"
            && (PROTECTED_NAMESPACES.contains(&id.name.as_str()) || id.name == self.own_namespace);
        if orphan || protected {
            let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
            info!(kind = %id.kind, namespace = %id.namespace, name = %id.name, "unlabelling an object that left the inventory");
            return match api
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(message(&e)),
            };
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: live["metadata"]["uid"].as_str().map(str::to_owned),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        info!(kind = %id.kind, namespace = %id.namespace, name = %id.name, "pruning an object that left the inventory");
        match api.delete(&id.name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(message(&e)),
        }
    }
}

/// The member object `name` read live (`None`: absent).
async fn live_object(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, kube::Error> {
    Ok(api
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

/// The identifier of a manifest (its resource name is filled in by discovery).
pub fn identify(ordinal: usize, manifest: &Value) -> ResourceIdentifier {
    flotilla_api::work::identify(ordinal, manifest)
}

/// Why discovery did not resolve a manifest's kind: the member does not serve it (it
/// answered so), or it could not be asked (unreachable, timed out).
fn discovery_failure(kind: &str, api_version: &str, e: &kube::Error) -> String {
    let refused =
        matches!(e, kube::Error::Discovery(_)) || matches!(e, kube::Error::Api(s) if s.code == 404);
    match refused {
        true => format!("the cluster does not serve {kind} in {api_version}: {e}"),
        false => format!("discovering {kind} in {api_version} failed: {e}"),
    }
}

/// Why the member refused: its Status reason (when it answered) and message.
type Refusal = (Option<String>, String);

fn refusal(e: &kube::Error) -> Refusal {
    (super::rejection::member_reason(e), message(e))
}

pub(crate) fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
