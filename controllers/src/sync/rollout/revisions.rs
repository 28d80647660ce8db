//! The record of earlier templates: one apps/v1 ControllerRevision per revision (hash of
//! the template and overrides) of a federated object, in the host, owned by the federated
//! object (so the garbage collector removes them with it). A cluster a rollout has not
//! reached is rendered from the revision its member object is annotated with, read from
//! here — after a restart too. Revisions are immutable, so what was read is cached.

use std::{collections::HashMap, sync::Mutex};

use flotilla_api::hash::bounded;
use k8s_openapi::{api::apps::v1::ControllerRevision, apimachinery::pkg::runtime::RawExtension};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions},
    core::DynamicObject,
};
use serde_json::Value;
use tracing::warn;

use super::super::{Key, type_info::TypeInfo};
use super::REVISION_CHARS;

/// Label on a revision: the federated object's kind (lowercase).
pub const KIND_LABEL: &str = "flotilla.io/federated-kind";
/// Label on a revision: the federated object's name.
pub const NAME_LABEL: &str = "flotilla.io/federated-name";

/// Revisions known to exist, with their content and the UID of the federated object that
/// owns them (empty when only read): (namespace, object name) → (content, owner UID).
#[derive(Default)]
pub struct Revisions {
    known: Mutex<HashMap<(String, String), (Value, String)>>,
}

impl Revisions {
    fn get(&self, at: &(String, String)) -> Option<(Value, String)> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(at).cloned()
    }

    fn put(&self, at: (String, String), content: Value, owner: String) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.insert(at, (content, owner));
    }

    /// Whether a revision of the object `prefix` names (`<kind>-<name>-`) in `ns` is known.
    fn knows(&self, ns: &str, prefix: &str) -> bool {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .keys()
            .any(|(n, name)| n == ns && revision_of(name, prefix))
    }

    /// Forgets the revisions of the object `prefix` names in `ns`.
    fn forget(&self, ns: &str, prefix: &str) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|(n, name), _| n != ns || !revision_of(name, prefix));
    }
}

/// Whether the revision `name` is one of the object whose revisions start with `prefix`
/// (`<kind>-<name>-`): a hash follows, which holds no `-`, so `web-canary`'s revisions are
/// not `web`'s.
fn revision_of(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|hash| !hash.is_empty() && !hash.contains('-'))
}

/// Name of revision `hash` of the federated object `name` of `kind` (lowercase):
/// `<kind>-<name>-<hash>`, a DNS subdomain of at most 253 characters. A name too long for
/// that is cut with a hash of the whole ([`bounded`]), to the same length whatever the hash
/// (empty for the prefix every revision of the object starts with).
fn revision_name(kind: &str, name: &str, hash: &str) -> String {
    let room = 253usize
        .saturating_sub(kind.len() + REVISION_CHARS + 2)
        .max(12);
    format!("{kind}-{}-{hash}", bounded(name, room))
}

/// The value of [`NAME_LABEL`] on the revisions of the federated object `name`: the name,
/// or for a name over 63 characters (the limit of a label value) its head and a hash of the
/// whole.
pub fn name_label(name: &str) -> String {
    bounded(name, 63)
}

/// The label selector of every revision of the federated object `name` of `kind`.
pub fn revisions_selector(kind: &str, name: &str) -> String {
    format!(
        "{KIND_LABEL}={},{NAME_LABEL}={}",
        kind.to_lowercase(),
        name_label(name)
    )
}

/// The Kubernetes finalizer of an object deleted with `propagationPolicy: Orphan`: its
/// dependents are to be kept (the garbage collector releases them).
const ORPHAN_DEPENDENTS: &str = "orphan";

/// Whether a federated object whose deletion is complete has revisions to remove before its
/// finalizer goes: it has (or had, `known`) a progressive or canary rollout, and was not
/// deleted with its dependents orphaned. The garbage collector would remove them too, once
/// the object is gone; but a collector held back (its retries backed off over host
/// outages, say) left them for minutes.
fn revisions_to_remove(finalizers: &[String], strategy: Option<&str>, known: bool) -> bool {
    let rollout = strategy.is_some_and(|s| s != "All");
    (rollout || known) && !finalizers.iter().any(|f| f == ORPHAN_DEPENDENTS)
}

/// Whether the host's answer to the removal is a refusal that a retry will not change
/// (forbidden, not found, method not allowed), rather than a failure to answer.
fn refused(code: u16) -> bool {
    matches!(code, 403..=405)
}

/// What to do with the stored revision of this name, for the federated object `uid`: keep
/// it when that object owns it; replace it when it is left from an earlier object of the
/// same name (deleted, its record not yet garbage-collected — kept, the collector would
/// remove it under the new object); create it when there is none.
#[derive(Debug, PartialEq, Eq)]
enum Stored {
    Keep,
    Replace,
    Create,
}

fn stored(found: Option<&ControllerRevision>, uid: &str) -> Stored {
    match found {
        None => Stored::Create,
        Some(r) if r.owner_references().iter().any(|o| o.uid == uid) => Stored::Keep,
        Some(_) => Stored::Replace,
    }
}

/// The revisions of one type's federated objects: where they are stored (the host, and
/// for a cluster-scoped type the control-plane namespace) and which are known to exist.
#[derive(Clone, Copy)]
pub(in super::super) struct RevisionStore<'a> {
    pub host: &'a Client,
    /// The revisions known to exist (every type's).
    pub known: &'a Revisions,
    /// The control-plane namespace.
    pub namespace: &'a str,
    pub ty: &'a TypeInfo,
}

impl RevisionStore<'_> {
    /// Where the revision `hash` of a federated object is stored: its namespace (for a
    /// cluster-scoped federated type, the control-plane namespace) and name.
    fn at(&self, key: &Key, hash: &str) -> (String, String) {
        let ns = key.0.clone().unwrap_or_else(|| self.namespace.to_owned());
        let kind = self.ty.fed_ar.kind.to_lowercase();
        (ns, revision_name(&kind, &key.1, hash))
    }

    /// Stores revision `hash` with `content`, owned by `fed`, unless it is known to exist
    /// for `fed`. One read after a start (or after the object was re-created under the same
    /// name), one create per new revision; nothing in a steady state.
    pub async fn ensure(
        &self,
        fed: &DynamicObject,
        key: &Key,
        hash: &str,
        content: &Value,
    ) -> Result<(), kube::Error> {
        let at = self.at(key, hash);
        let uid = fed.uid().unwrap_or_default();
        if (self.known.get(&at)).is_some_and(|(_, owner)| owner == uid) {
            return Ok(());
        }
        let api: Api<ControllerRevision> = Api::namespaced(self.host.clone(), &at.0);
        let found = api.get_opt(&at.1).await?;
        let action = stored(found.as_ref(), &uid);
        if action == Stored::Replace {
            let stale = found.as_ref().and_then(|r| r.uid());
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: stale,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&at.1, &params).await {
                Ok(_) => {}
                // Already collected, or replaced in the meantime: the create below says.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        if action != Stored::Keep {
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(at.1.clone()),
                    namespace: Some(at.0.clone()),
                    labels: Some(
                        [
                            (KIND_LABEL.to_string(), self.ty.fed_ar.kind.to_lowercase()),
                            (NAME_LABEL.to_string(), name_label(&key.1)),
                        ]
                        .into(),
                    ),
                    owner_references: Some(vec![self.ty.owner(fed)]),
                    ..ObjectMeta::default()
                },
                data: Some(RawExtension(content.clone())),
                revision: fed.metadata.generation.unwrap_or(0),
            };
            match api.create(&PostParams::default(), &revision).await {
                Ok(_) => {}
                // Created by another reconcile of this object in the meantime: same content;
                // a stale one still in the way is replaced on the next reconcile.
                Err(kube::Error::Api(s)) if s.code == 409 && action == Stored::Create => {}
                Err(e) => return Err(e),
            }
        }
        self.known.put(at, content.clone(), uid);
        Ok(())
    }

    /// Removes the revisions of a federated object whose deletion is complete (see
    /// [`revisions_to_remove`]): one delete-collection by its labels, in the host. A host
    /// that does not answer fails the reconcile (retried, the finalizer stays); one that
    /// refuses (no `deletecollection` in an older ClusterRole) leaves them to the garbage
    /// collector and never holds the deletion.
    pub async fn remove(
        &self,
        key: &Key,
        fed: &DynamicObject,
    ) -> Result<(), super::super::action::Error> {
        let (ns, prefix) = self.at(key, "");
        let known = self.known.knows(&ns, &prefix);
        let strategy = fed
            .data
            .pointer("/spec/rollout/strategy")
            .and_then(Value::as_str);
        if !revisions_to_remove(fed.finalizers(), strategy, known) {
            return Ok(());
        }
        let api: Api<ControllerRevision> = Api::namespaced(self.host.clone(), &ns);
        let selector = revisions_selector(&self.ty.fed_ar.kind, &key.1);
        let params = ListParams::default().labels(&selector);
        match api
            .delete_collection(&DeleteParams::default(), &params)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if refused(s.code) => {
                warn!(object = ?key, reason = %s.reason, "removing the rollout revisions was refused; the garbage collector will");
            }
            Err(e) => return Err(super::super::action::Error::Revisions(e)),
        }
        self.known.forget(&ns, &prefix);
        Ok(())
    }

    /// The content (template and overrides) of revision `hash`, when it is stored.
    pub async fn get(&self, key: &Key, hash: &str) -> Result<Option<Value>, kube::Error> {
        let at = self.at(key, hash);
        if let Some((content, _)) = self.known.get(&at) {
            return Ok(Some(content));
        }
        let api: Api<ControllerRevision> = Api::namespaced(self.host.clone(), &at.0);
        let Some(found) = api.get_opt(&at.1).await? else {
            return Ok(None);
        };
        let content = found.data.map(|d| d.0).unwrap_or(Value::Null);
        self.known.put(at, content.clone(), String::new());
        Ok(Some(content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn revision(owners: &[&str]) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                owner_references: Some(
                    owners
                        .iter()
                        .map(|uid| OwnerReference {
                            uid: (*uid).to_owned(),
                            ..OwnerReference::default()
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..ControllerRevision::default()
        }
    }

    #[test]
    fn a_revision_left_by_an_earlier_object_of_the_same_name_is_replaced() {
        assert_eq!(stored(None, "b"), Stored::Create);
        assert_eq!(stored(Some(&revision(&["b"])), "b"), Stored::Keep);
        assert_eq!(stored(Some(&revision(&["a"])), "b"), Stored::Replace);
        assert_eq!(stored(Some(&revision(&[])), "b"), Stored::Replace);
    }

    #[test]
    fn revisions_go_with_a_rolled_out_object_unless_its_dependents_are_orphaned() {
        let none: &[String] = &[];
        let orphan = ["orphan".to_owned()];
        assert!(revisions_to_remove(none, Some("Progressive"), false));
        assert!(revisions_to_remove(none, Some("Canary"), false));
        // The rollout was removed from the spec, its revisions are still known.
        assert!(revisions_to_remove(none, None, true));
        // Never rolled out progressively: nothing to remove, no request.
        assert!(!revisions_to_remove(none, None, false));
        assert!(!revisions_to_remove(none, Some("All"), false));
        // `propagationPolicy: Orphan`: the garbage collector keeps them, so do we.
        assert!(!revisions_to_remove(&orphan, Some("Progressive"), true));
    }

    #[test]
    fn a_refusal_is_left_to_the_collector_and_a_failure_to_answer_is_retried() {
        assert!(refused(403) && refused(404) && refused(405));
        assert!(!refused(500) && !refused(503) && !refused(429) && !refused(504));
    }

    #[test]
    fn names_and_labels_of_revisions_fit_their_limits_however_long_the_object_name() {
        let kind = "federateddeployment";
        let hash = "a".repeat(REVISION_CHARS);
        assert_eq!(
            revision_name(kind, "web", &hash),
            format!("{kind}-web-{hash}")
        );
        assert_eq!(name_label("web"), "web");
        for len in [63, 64, 200, 253] {
            let name = "n".repeat(len);
            let full = revision_name(kind, &name, &hash);
            assert!(full.len() <= 253, "{len}: {}", full.len());
            // The prefix every revision of the object starts with is cut the same way.
            assert!(revision_of(&full, &revision_name(kind, &name, "")));
            assert!(name_label(&name).len() <= 63);
        }
        // Two long names that share their head stay apart, in the label and the name.
        let (a, b) = ("m".repeat(240) + "a", "m".repeat(240) + "b");
        assert_ne!(name_label(&a), name_label(&b));
        assert_ne!(
            revision_name(kind, &a, &hash),
            revision_name(kind, &b, &hash)
        );
        assert!(!revision_of(
            &revision_name(kind, &a, &hash),
            &revision_name(kind, &b, "")
        ));
    }

    #[test]
    fn forgetting_an_objects_revisions_keeps_the_others() {
        let r = Revisions::default();
        let at = |ns: &str, n: &str| (ns.to_owned(), n.to_owned());
        r.put(
            at("a", "federateddeployment-web-1"),
            Value::Null,
            "u".into(),
        );
        r.put(
            at("a", "federateddeployment-web-2"),
            Value::Null,
            "u".into(),
        );
        r.put(
            at("a", "federateddeployment-webx-1"),
            Value::Null,
            "v".into(),
        );
        r.put(
            at("b", "federateddeployment-web-1"),
            Value::Null,
            "w".into(),
        );
        r.put(
            at("a", "federateddeployment-web-canary-1"),
            Value::Null,
            "x".into(),
        );
        assert!(r.knows("a", "federateddeployment-web-"));
        r.forget("a", "federateddeployment-web-");
        assert!(!r.knows("a", "federateddeployment-web-"));
        assert!(r.get(&at("a", "federateddeployment-webx-1")).is_some());
        assert!(r.get(&at("b", "federateddeployment-web-1")).is_some());
        // Another object whose name starts with this one's.
        assert!(
            r.get(&at("a", "federateddeployment-web-canary-1"))
                .is_some()
        );
        assert!(r.knows("a", "federateddeployment-web-canary-"));
    }
}
