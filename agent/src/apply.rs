//! The agent's writes to its own (member) cluster: resolving a manifest's kind through
//! discovery (cached per kind), reading the live object, server-side apply with field
//! manager `flotilla-agent`, and pruning an object it applied earlier — checked live
//! first, deleted with the recorded UID as a precondition, or only unlabelled for
//! namespaces that must never be deleted and for orphaned Works.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use flotilla_crds::{
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

use super::plan::{ManifestOp, ManifestResult, check_manifest, decide, manifest_hash, may_prune};
use flotilla_crds::member::PROTECTED_NAMESPACES;

/// A kind the member serves: its resource and whether it is namespaced.
#[derive(Clone)]
struct Resolved {
    ar: ApiResource,
    namespaced: bool,
}

/// The member side of the agent: a client and the kinds resolved so far.
#[derive(Clone)]
pub struct Member {
    client: Client,
    kinds: Arc<Mutex<HashMap<(String, String), Resolved>>>,
    /// Namespaces never deleted (the agent's own, besides the system ones).
    own_namespace: String,
}

impl Member {
    /// The member seen through `client`; `own_namespace` (where the agent runs) is never
    /// deleted.
    pub fn new(client: Client, own_namespace: &str) -> Self {
        Member {
            client,
            kinds: Arc::default(),
            own_namespace: own_namespace.to_owned(),
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
            .map_err(|e| format!("the cluster does not serve {kind} in {api_version}: {e}"))?;
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

    /// Makes one manifest true in the member; returns the verdict and, when the object
    /// exists, what to record for pruning.
    pub async fn apply_manifest(
        &self,
        ordinal: usize,
        manifest: &Value,
        collect_status: bool,
    ) -> (ManifestResult, Option<AppliedResourceMeta>) {
        let mut identifier = identify(ordinal, manifest);
        let mut result = ManifestResult {
            identifier: identifier.clone(),
            result: Ok(()),
            hash: manifest_hash(manifest).map(str::to_owned),
            generation: None,
            status: None,
        };
        if let Err(msg) = check_manifest(manifest) {
            result.result = Err((ClusterReason::CreationFailed, msg));
            return (result, None);
        }
        let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
        let resolved = match self.resolve(api_version, &identifier.kind).await {
            Ok(r) => r,
            Err(msg) => {
                result.result = Err((ClusterReason::CreationFailed, msg));
                return (result, None);
            }
        };
        identifier.resource = resolved.ar.plural.clone();
        result.identifier = identifier.clone();
        let api = self.api(&resolved, &identifier.namespace);
        let live = match api.get_opt(&identifier.name).await {
            Ok(live) => live.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)),
            Err(e) => {
                result.result = Err((ClusterReason::RetrievalFailed, message(&e)));
                return (result, None);
            }
        };
        let current = match decide(manifest, live.as_ref()) {
            ManifestOp::Nothing => live,
            ManifestOp::Refuse(reason, msg) => {
                result.result = Err((reason, msg));
                return (result, None);
            }
            ManifestOp::Apply => {
                let failed = if live.is_some() {
                    ClusterReason::UpdateFailed
                } else {
                    ClusterReason::CreationFailed
                };
                let pp = PatchParams::apply(AGENT_FIELD_MANAGER).force();
                match api
                    .patch(&identifier.name, &pp, &Patch::Apply(manifest))
                    .await
                {
                    Ok(o) => {
                        info!(kind = %identifier.kind, namespace = %identifier.namespace, name = %identifier.name, "applied");
                        Some(serde_json::to_value(o).unwrap_or(Value::Null))
                    }
                    Err(e) => {
                        result.result = Err((failed, message(&e)));
                        live
                    }
                }
            }
        };
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
        (result, record)
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
        let live = match api.get_opt(&id.name).await {
            Ok(Some(o)) => serde_json::to_value(o).unwrap_or(Value::Null),
            Ok(None) => return Ok(()),
            Err(e) => return Err(message(&e)),
        };
        if !may_prune(&applied.uid, &live) {
            return Ok(());
        }
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

/// The identifier of a manifest (its resource name is filled in by discovery).
pub fn identify(ordinal: usize, manifest: &Value) -> ResourceIdentifier {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let text = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ResourceIdentifier {
        ordinal: i32::try_from(ordinal).unwrap_or(i32::MAX),
        group: group.to_owned(),
        version: version.to_owned(),
        kind: text("/kind"),
        resource: String::new(),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
    }
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
