//! The reconcile key of a multi-cluster controller.

use std::fmt;

use kube::Resource;

/// What a multi-cluster controller reconciles: an object in one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The cluster (its name in the cluster set).
    pub cluster: String,
    /// The namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `obj`, seen in `cluster`.
    pub fn of<K: Resource>(cluster: &str, obj: &K) -> Self {
        ObjectKey {
            cluster: cluster.to_owned(),
            namespace: obj.meta().namespace.clone(),
            name: obj.meta().name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.cluster, ns, self.name),
            None => write!(f, "{}/{}", self.cluster, self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

    use super::*;

    #[test]
    fn keys_name_the_cluster_namespace_and_object() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.namespace = Some("ns".into());
        assert_eq!(ObjectKey::of("c1", &cm).to_string(), "c1/ns/a");
        let mut ns = Namespace::default();
        ns.metadata.name = Some("ns".into());
        assert_eq!(ObjectKey::of("c1", &ns).to_string(), "c1/ns");
    }
}
