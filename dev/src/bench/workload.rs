//! The workload: the kinds of objects written (ConfigMaps, Deployments), their names and
//! content in the raw and the federated form, and the bounded-concurrency writer that marks
//! when each object's first write started. It decides what is written, not what is measured.

use std::{
    collections::HashMap,
    future::Future,
    sync::Mutex,
    time::{Duration, Instant},
};

use flotilla_api::{
    core::{ApiResource as TypeApiResource, Scope},
    crdgen,
};
use futures::{StreamExt, TryStreamExt, stream};
use kube::{api::DynamicObject, core::ApiResource};
use serde_json::{Value, json};
use tracing::warn;

use super::{BENCH_LABEL, POLICY_SELECT_LABEL, RAW_NS};

/// A kind of workload object.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    ConfigMap,
    Deployment,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
        }
    }

    /// The target type as Flotilla's API types describe it.
    fn target_type(self) -> TypeApiResource {
        let (group, kind, plural) = match self {
            Kind::ConfigMap => ("", "ConfigMap", "configmaps"),
            Kind::Deployment => ("apps", "Deployment", "deployments"),
        };
        TypeApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural_name: plural.into(),
            scope: Scope::Namespaced,
        }
    }

    /// The target type (what the members hold).
    pub(super) fn target(self) -> ApiResource {
        self.target_type().to_kube()
    }

    /// Its Federated<Kind> in the host.
    pub(super) fn federated(self) -> ApiResource {
        crdgen::federated_api_resource(&self.target_type()).to_kube()
    }

    pub(super) fn prefix(self) -> &'static str {
        match self {
            Kind::ConfigMap => "cm",
            Kind::Deployment => "deploy",
        }
    }

    /// The object's content apart from identity: `metadata.labels` and the rest.
    fn content(self, name: &str, part: &str, version: &str) -> Value {
        match self {
            Kind::ConfigMap => json!({
                "metadata": {"labels": {BENCH_LABEL: part}},
                "data": {"name": name, "payload": "x".repeat(64), "v": version},
            }),
            Kind::Deployment => json!({
                "metadata": {"labels": {BENCH_LABEL: part}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}, "annotations": {"bench/v": version}},
                        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
                    },
                },
            }),
        }
    }

    /// A merge patch of the content that sets the version.
    pub(super) fn version_patch(self, version: &str) -> Value {
        match self {
            Kind::ConfigMap => json!({"data": {"v": version}}),
            Kind::Deployment => {
                json!({"spec": {"template": {"metadata": {"annotations": {"bench/v": version}}}}})
            }
        }
    }

    /// Where the version sits in the member object; the federated object holds the same
    /// content under `/spec/template`.
    fn version_pointer(self) -> &'static str {
        match self {
            Kind::ConfigMap => "/data/v",
            Kind::Deployment => "/spec/template/metadata/annotations/bench~1v",
        }
    }

    pub(super) fn version_of(self, obj: &DynamicObject) -> Option<String> {
        string_at(obj, self.version_pointer())
    }

    /// The version in a federated object's template.
    pub(super) fn federated_version_of(self, obj: &DynamicObject) -> Option<String> {
        string_at(obj, &format!("/spec/template{}", self.version_pointer()))
    }

    pub(super) fn raw_object(self, name: &str, version: &str) -> anyhow::Result<DynamicObject> {
        self.plain_object(RAW_NS, "raw", name, version)
    }

    /// The kind's own object in the host for the policy path: labelled for the
    /// benchmark's PropagationPolicy.
    pub(super) fn native_object(
        self,
        namespace: &str,
        name: &str,
        version: &str,
    ) -> anyhow::Result<DynamicObject> {
        let mut o = self.plain_object(namespace, "policy", name, version)?;
        o.metadata
            .labels
            .get_or_insert_default()
            .insert(POLICY_SELECT_LABEL.into(), "true".into());
        Ok(o)
    }

    fn plain_object(
        self,
        namespace: &str,
        part: &str,
        name: &str,
        version: &str,
    ) -> anyhow::Result<DynamicObject> {
        let mut v = self.content(name, part, version);
        let ar = self.target();
        v["apiVersion"] = json!(ar.api_version);
        v["kind"] = json!(ar.kind);
        v["metadata"]["name"] = json!(name);
        v["metadata"]["namespace"] = json!(namespace);
        Ok(serde_json::from_value(v)?)
    }

    pub(super) fn federated_object(
        self,
        namespace: &str,
        name: &str,
        version: &str,
    ) -> anyhow::Result<DynamicObject> {
        let ar = self.federated();
        Ok(serde_json::from_value(json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": {BENCH_LABEL: "fed"}},
            "spec": {
                "template": self.content(name, "fed", version),
                "placement": {"clusterSelector": {}},
            },
        }))?)
    }
}

/// The FederatedNamespace type, which places the benchmark's namespace into the members.
pub(super) fn federated_namespace() -> ApiResource {
    let namespace = TypeApiResource {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
        plural_name: "namespaces".into(),
        scope: Scope::Cluster,
    };
    crdgen::federated_api_resource(&namespace).to_kube()
}

/// The names of `n` objects of `kind`.
pub(super) fn names(kind: Kind, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{}-{i:05}", kind.prefix()))
        .collect()
}

#[derive(Default)]
pub(super) struct Starts(Mutex<HashMap<String, Instant>>);

impl Starts {
    pub(super) fn mark(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_insert_with(Instant::now);
    }

    pub(super) fn take(&self) -> HashMap<String, Instant> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The string at a JSON pointer of the object's content, if there is one.
fn string_at(obj: &DynamicObject, pointer: &str) -> Option<String> {
    obj.data
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Calls `op` for every name, `concurrency` at a time, marking each start; a failed call
/// is retried a few times (a conflict after a retried create counts as done).
pub(super) async fn write_all<F, Fut>(
    names: &[String],
    concurrency: usize,
    starts: &Starts,
    op: F,
) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    stream::iter(names.iter().cloned())
        .map(|name| {
            let op = &op;
            async move {
                starts.mark(&name);
                let mut attempt = 0;
                loop {
                    match op(name.clone()).await {
                        Ok(()) => return Ok(()),
                        Err(kube::Error::Api(s))
                            if attempt > 0 && (s.code == 409 || s.code == 404) =>
                        {
                            return Ok(());
                        }
                        Err(e) if attempt < 3 => {
                            warn!(error = %e, %name, "benchmark write failed; retrying");
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => {
                            return Err(anyhow::Error::new(e).context(format!("writing {name}")));
                        }
                    }
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}

/// An error of building an object, as the kube error a write closure returns.
pub(super) fn to_kube(e: anyhow::Error) -> kube::Error {
    kube::Error::SerdeError(serde_json::Error::io(std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_federated_types_are_the_kubefed_ones() {
        let fcm = Kind::ConfigMap.federated();
        assert_eq!(
            (
                fcm.api_version.as_str(),
                fcm.kind.as_str(),
                fcm.plural.as_str()
            ),
            (
                "types.kubefed.io/v1beta1",
                "FederatedConfigMap",
                "federatedconfigmaps"
            )
        );
        assert_eq!(Kind::Deployment.federated().plural, "federateddeployments");
        assert_eq!(Kind::Deployment.target().api_version, "apps/v1");
        assert_eq!(Kind::ConfigMap.target().api_version, "v1");
        let fns = federated_namespace();
        assert_eq!(
            (fns.kind.as_str(), fns.plural.as_str()),
            ("FederatedNamespace", "federatednamespaces")
        );
    }
}
