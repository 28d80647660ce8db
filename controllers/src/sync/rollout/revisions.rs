//! The record of earlier templates: one apps/v1 ControllerRevision per revision (hash of
//! the template and overrides) of a federated object, in the host, owned by the federated
//! object (so the garbage collector removes them with it). A cluster a rollout has not
//! reached is rendered from the revision its member object is annotated with, read from
//! here — after a restart too. Revisions are immutable, so what was read is cached.

use std::{collections::HashMap, sync::Mutex};

use k8s_openapi::{
    api::apps::v1::ControllerRevision,
    apimachinery::pkg::{apis::meta::v1::OwnerReference, runtime::RawExtension},
};
use kube::{
    Api, Resource, ResourceExt,
    api::{ObjectMeta, PostParams},
    core::DynamicObject,
};
use serde_json::Value;

use super::super::{Key, ctl::Ctl};

/// Label on a revision: the federated object's kind (lowercase).
pub const KIND_LABEL: &str = "flotilla.io/federated-kind";
/// Label on a revision: the federated object's name.
pub const NAME_LABEL: &str = "flotilla.io/federated-name";

/// Revisions known to exist, with their content: (namespace, object name) → content.
#[derive(Default)]
pub struct Revisions {
    known: Mutex<HashMap<(String, String), Value>>,
}

impl Revisions {
    fn get(&self, at: &(String, String)) -> Option<Value> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(at).cloned()
    }

    fn put(&self, at: (String, String), content: Value) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.insert(at, content);
    }
}

impl Ctl {
    /// Where the revision `hash` of a federated object is stored: its namespace (for a
    /// cluster-scoped federated type, the control-plane namespace) and name.
    fn revision_at(&self, key: &Key, hash: &str) -> (String, String) {
        let ns = key
            .0
            .clone()
            .unwrap_or_else(|| self.shared.namespace.clone());
        let kind = self.fed_ar.kind.to_lowercase();
        // A DNS subdomain of at most 253 characters.
        let room = 253usize.saturating_sub(kind.len() + hash.len() + 2);
        let name: String = key.1.chars().take(room).collect();
        (ns, format!("{kind}-{name}-{hash}"))
    }

    /// Stores revision `hash` with `content` unless it is known to exist. One read after a
    /// start, one create per new revision; nothing in a steady state.
    pub(super) async fn ensure_revision(
        &self,
        fed: &DynamicObject,
        key: &Key,
        hash: &str,
        content: &Value,
    ) -> Result<(), kube::Error> {
        let at = self.revision_at(key, hash);
        if self.shared.revisions.get(&at).is_some() {
            return Ok(());
        }
        let api: Api<ControllerRevision> = Api::namespaced(self.shared.host.clone(), &at.0);
        if api.get_opt(&at.1).await?.is_none() {
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(at.1.clone()),
                    namespace: Some(at.0.clone()),
                    labels: Some(
                        [
                            (KIND_LABEL.to_string(), self.fed_ar.kind.to_lowercase()),
                            (NAME_LABEL.to_string(), key.1.clone()),
                        ]
                        .into(),
                    ),
                    owner_references: Some(vec![self.owner(fed)]),
                    ..ObjectMeta::default()
                },
                data: Some(RawExtension(content.clone())),
                revision: fed.metadata.generation.unwrap_or(0),
            };
            match api.create(&PostParams::default(), &revision).await {
                Ok(_) => {}
                // Created by another reconcile in the meantime: same content.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        self.shared.revisions.put(at, content.clone());
        Ok(())
    }

    /// The content (template and overrides) of revision `hash`, when it is stored.
    pub(super) async fn revision(
        &self,
        key: &Key,
        hash: &str,
    ) -> Result<Option<Value>, kube::Error> {
        let at = self.revision_at(key, hash);
        if let Some(content) = self.shared.revisions.get(&at) {
            return Ok(Some(content));
        }
        let api: Api<ControllerRevision> = Api::namespaced(self.shared.host.clone(), &at.0);
        let Some(found) = api.get_opt(&at.1).await? else {
            return Ok(None);
        };
        let content = found.data.map(|d| d.0).unwrap_or(Value::Null);
        self.shared.revisions.put(at, content.clone());
        Ok(Some(content))
    }

    fn owner(&self, fed: &DynamicObject) -> OwnerReference {
        OwnerReference {
            api_version: DynamicObject::api_version(&self.fed_ar).to_string(),
            kind: self.fed_ar.kind.clone(),
            name: fed.name_any(),
            uid: fed.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}
