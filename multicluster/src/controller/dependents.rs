//! The owner → dependents index across clusters: every kind a controller owns
//! ([`super::Controller::owns`]) is cached in each selected cluster, filtered to objects
//! with a multi-cluster owner; this module answers "which dependents does this owner have,
//! where" and "which clusters cannot be seen now" from those caches (a scan of the
//! caches, no I/O).

use std::{collections::BTreeSet, fmt::Debug, hash::Hash, sync::Arc};

use kube::{Resource, ResourceExt, core::ApiResource};
use serde::de::DeserializeOwned;

use crate::{
    ClusterSet, MemberWatch,
    member_watch::ClusterSelector,
    ownership::{Dependent, MultiClusterOwner, owner_of},
};

/// One owned kind, as the garbage collector sees it.
pub(crate) trait DependentSource: Send + Sync {
    /// The kind's API resource (deletes and orphaning go through the dynamic API).
    fn api_resource(&self) -> &ApiResource;
    /// Dependents of `owner` in every cluster whose cache is complete.
    fn dependents_of(&self, owner: &MultiClusterOwner) -> Vec<Dependent>;
    /// Every dependent with the owner it names.
    fn all(&self) -> Vec<(Dependent, MultiClusterOwner)>;
    /// Registered clusters this kind is watched in whose cache is not complete now
    /// (unready, or still listing): they may hold dependents nobody can see.
    fn unseen(&self, set: &ClusterSet) -> BTreeSet<String>;
}

pub(crate) struct OwnedKind<W: Resource + Clone + 'static>
where
    W::DynamicType: Eq + Hash + Clone,
{
    pub cache: Arc<MemberWatch<W>>,
    pub ar: ApiResource,
    pub clusters: ClusterSelector,
}

fn dependent<W: Resource>(cluster: &str, obj: &W) -> Dependent {
    Dependent {
        cluster: cluster.to_owned(),
        namespace: obj.meta().namespace.clone(),
        name: obj.meta().name.clone().unwrap_or_default(),
        uid: obj.meta().uid.clone(),
        deleting: obj.meta().deletion_timestamp.is_some(),
    }
}

impl<W> DependentSource for OwnedKind<W>
where
    W: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    W::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    fn api_resource(&self) -> &ApiResource {
        &self.ar
    }

    fn dependents_of(&self, owner: &MultiClusterOwner) -> Vec<Dependent> {
        self.all()
            .into_iter()
            .filter(|(_, o)| o == owner)
            .map(|(d, _)| d)
            .collect()
    }

    fn all(&self) -> Vec<(Dependent, MultiClusterOwner)> {
        self.cache
            .list_all()
            .into_iter()
            .filter_map(|(cluster, obj)| {
                // A malformed reference names no owner: such an object is never collected.
                let owner = owner_of(obj.as_ref()).ok().flatten()?;
                Some((dependent(&cluster, obj.as_ref()), owner))
            })
            .collect()
    }

    fn unseen(&self, set: &ClusterSet) -> BTreeSet<String> {
        set.snapshot()
            .into_iter()
            .map(|c| c.name)
            .filter(|name| self.clusters.matches(name) && !self.cache.is_synced(name))
            .collect()
    }
}

/// The selector of a dependents watch: the caller's, and only objects with an owner.
pub(crate) fn owned_labels(user: Option<&str>) -> String {
    let owned = crate::ownership::owned_selector();
    match user.filter(|s| !s.is_empty()) {
        Some(selector) => format!("{selector},{owned}"),
        None => owned,
    }
}

/// Whether `obj` names an owner of kind `api_version`/`kind`; its key if so.
pub(crate) fn owner_key_of<W: ResourceExt>(
    obj: &W,
    api_version: &str,
    kind: &str,
) -> Option<crate::ObjectKey> {
    owner_of(obj)
        .ok()
        .flatten()
        .filter(|o| o.is_kind(api_version, kind))
        .map(|o| o.key())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;
    use crate::ownership::OWNER_ANNOTATION;

    fn owned_by(kind: &str) -> Deployment {
        let owner = MultiClusterOwner {
            cluster: "member2".into(),
            api_version: "samplecontroller.k8s.io/v1alpha1".into(),
            kind: kind.into(),
            namespace: Some("default".into()),
            name: "web".into(),
            uid: "u1".into(),
        };
        let mut d = Deployment::default();
        owner.set_on(&mut d.metadata);
        d
    }

    #[test]
    fn a_dependent_maps_to_its_owners_key_in_the_owners_cluster() {
        let key = owner_key_of(&owned_by("Foo"), "samplecontroller.k8s.io/v1alpha1", "Foo");
        assert_eq!(
            key,
            Some(crate::ObjectKey {
                cluster: "member2".into(),
                namespace: Some("default".into()),
                name: "web".into(),
            })
        );
    }

    #[test]
    fn a_dependent_of_another_kind_or_with_a_broken_reference_maps_to_nothing() {
        let api_version = "samplecontroller.k8s.io/v1alpha1";
        assert_eq!(owner_key_of(&owned_by("Bar"), api_version, "Foo"), None);
        let mut broken = owned_by("Foo");
        broken
            .annotations_mut()
            .insert(OWNER_ANNOTATION.into(), "{".into());
        assert_eq!(owner_key_of(&broken, api_version, "Foo"), None);
        assert_eq!(
            owner_key_of(&Deployment::default(), api_version, "Foo"),
            None
        );
    }

    #[test]
    fn a_dependents_watch_keeps_the_callers_selector_and_adds_the_owner_label() {
        assert_eq!(owned_labels(None), crate::ownership::OWNER_LABEL);
        assert_eq!(
            owned_labels(Some("app=db")),
            format!("app=db,{}", crate::ownership::OWNER_LABEL)
        );
    }
}
