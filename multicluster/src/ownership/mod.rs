//! Cross-cluster ownership, as pure data and decisions (no I/O): the multi-cluster owner
//! reference stored on a dependent (an annotation with the whole reference and a label with
//! the owner's uid, so dependents can be selected), and the garbage-collection decision
//! tables. The I/O that carries the decisions out is in [`crate::gc`].
//!
//! The one rule every decision keeps: a dependent is collected only when its owner is
//! *confirmed* gone by the owner's own cluster. An unreachable owner cluster means "wait",
//! never "delete".

mod decide;

pub use decide::{
    DeletionPolicy, Dependent, FinalizePlan, GcDecision, OwnerObservation, decide_dependent,
    plan_finalize,
};

use std::collections::BTreeMap;

use kube::{Resource, ResourceExt, api::ObjectMeta};
use serde::{Deserialize, Serialize};

use crate::controller::key::ObjectKey;

/// Annotation holding the whole owner reference (JSON).
pub const OWNER_ANNOTATION: &str = "multicluster.flotilla.io/owner";
/// Label holding the owner's uid, for selecting an owner's dependents in any cluster.
pub const OWNER_LABEL: &str = "multicluster.flotilla.io/owner-uid";

/// A reference from a dependent to its owner, which may live in another cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterOwner {
    /// The owner's cluster (its name in the cluster set).
    pub cluster: String,
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's namespace; `None` for a cluster-scoped owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The owner's name.
    pub name: String,
    /// The owner's uid: a new object under the same name is another owner.
    pub uid: String,
}

/// Why an owner reference cannot be read from a dependent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OwnerRefError {
    /// The annotation is not a JSON owner reference.
    #[error("annotation {OWNER_ANNOTATION} is not an owner reference: {0}")]
    Malformed(String),
    /// The label and the annotation name different owners (one was edited by hand).
    #[error("label {OWNER_LABEL} does not match the uid in annotation {OWNER_ANNOTATION}")]
    LabelMismatch,
    /// The owner object has no uid or name yet (it was never stored by an API server).
    #[error("the owner has no name or uid yet")]
    OwnerNotStored,
}

impl MultiClusterOwner {
    /// The reference to `owner`, an object stored in `cluster`.
    pub fn of<K>(cluster: &str, owner: &K, dyntype: &K::DynamicType) -> Result<Self, OwnerRefError>
    where
        K: Resource,
    {
        let meta = owner.meta();
        let (Some(name), Some(uid)) = (meta.name.clone(), meta.uid.clone()) else {
            return Err(OwnerRefError::OwnerNotStored);
        };
        Ok(MultiClusterOwner {
            cluster: cluster.to_owned(),
            api_version: K::api_version(dyntype).into_owned(),
            kind: K::kind(dyntype).into_owned(),
            namespace: meta.namespace.clone(),
            name,
            uid,
        })
    }

    /// The reconcile key of the owner.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            cluster: self.cluster.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Whether the reference points at an object of `api_version`/`kind`.
    pub fn is_kind(&self, api_version: &str, kind: &str) -> bool {
        self.api_version == api_version && self.kind == kind
    }

    /// Marks `meta` (a dependent's metadata) as owned by this owner.
    pub fn set_on(&self, meta: &mut ObjectMeta) {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(OWNER_ANNOTATION.into(), self.encode());
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(OWNER_LABEL.into(), self.uid.clone());
    }

    /// The annotation's value.
    pub fn encode(&self) -> String {
        // A struct of strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The label selector of every dependent of this owner.
    pub fn selector(&self) -> String {
        format!("{OWNER_LABEL}={}", self.uid)
    }
}

/// The owner reference of a dependent: `Ok(None)` when it has none.
pub fn owner_of(obj: &impl ResourceExt) -> Result<Option<MultiClusterOwner>, OwnerRefError> {
    let Some(value) = obj.annotations().get(OWNER_ANNOTATION) else {
        return Ok(None);
    };
    let owner: MultiClusterOwner =
        serde_json::from_str(value).map_err(|e| OwnerRefError::Malformed(e.to_string()))?;
    if obj.labels().get(OWNER_LABEL) != Some(&owner.uid) {
        return Err(OwnerRefError::LabelMismatch);
    }
    Ok(Some(owner))
}

/// The selector of every object that has a multi-cluster owner (for watches of dependents).
pub fn owned_selector() -> String {
    OWNER_LABEL.to_owned()
}

/// The merge patch that removes the owner reference from a dependent (orphaning it).
pub fn orphan_patch() -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "annotations": { OWNER_ANNOTATION: null },
            "labels": { OWNER_LABEL: null },
        }
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};

    use super::*;

    fn foo_owner() -> MultiClusterOwner {
        MultiClusterOwner {
            cluster: "member1".into(),
            api_version: "samplecontroller.k8s.io/v1alpha1".into(),
            kind: "Foo".into(),
            namespace: Some("default".into()),
            name: "example-foo".into(),
            uid: "0b7c-11".into(),
        }
    }

    #[test]
    fn an_owner_reference_survives_the_round_trip_through_a_dependent() {
        let mut d = Deployment::default();
        foo_owner().set_on(&mut d.metadata);
        assert_eq!(owner_of(&d), Ok(Some(foo_owner())));
        assert_eq!(d.labels()[OWNER_LABEL], "0b7c-11");
    }

    #[test]
    fn an_object_without_the_annotation_has_no_owner() {
        assert_eq!(owner_of(&ConfigMap::default()), Ok(None));
    }

    #[test]
    fn a_hand_edited_annotation_is_an_error_not_an_owner() {
        let mut d = Deployment::default();
        foo_owner().set_on(&mut d.metadata);
        d.annotations_mut()
            .insert(OWNER_ANNOTATION.into(), "{not json".into());
        assert!(matches!(owner_of(&d), Err(OwnerRefError::Malformed(_))));
    }

    #[test]
    fn a_label_naming_another_uid_is_an_error() {
        let mut d = Deployment::default();
        foo_owner().set_on(&mut d.metadata);
        d.labels_mut().insert(OWNER_LABEL.into(), "other".into());
        assert_eq!(owner_of(&d), Err(OwnerRefError::LabelMismatch));
    }

    #[test]
    fn the_reference_of_an_object_names_its_cluster_kind_and_uid() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some("u1".into());
        let owner = MultiClusterOwner::of("c2", &cm, &()).expect("a stored object");
        assert_eq!(
            (owner.api_version.as_str(), owner.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert_eq!(
            owner.key(),
            ObjectKey {
                cluster: "c2".into(),
                namespace: Some("ns".into()),
                name: "a".into()
            }
        );
        assert_eq!(
            MultiClusterOwner::of("c2", &ConfigMap::default(), &()),
            Err(OwnerRefError::OwnerNotStored)
        );
    }
}
