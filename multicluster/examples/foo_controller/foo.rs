//! The Foo controller: sample-controller made multi-cluster with `flotilla-multicluster`.
//! A Foo in any member cluster gets a Deployment in the central cluster's `foo` namespace,
//! under a name that cannot collide across clusters; the Deployment's available replicas
//! are copied back into the Foo's status; a deleted Deployment is recreated; a deleted Foo
//! deletes its Deployment through the cross-cluster garbage collector; Events go to the Foo
//! in its own cluster. Used by `main.rs` and by the end-to-end test.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use flotilla_multicluster::{
    Action, Cache, ClusterEvent, ClusterSet, Context, Controller, ControllerMetrics,
    DeletionPolicy, MultiClusterOwner, ObjectKey, WatchOptions, ownership::OwnerRefError,
};
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentSpec},
        core::v1::{Container, Namespace, PodSpec, PodTemplateSpec},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api, CustomResource, Resource, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams},
    runtime::events::EventType,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

/// The Foo CRD, as installed in the member clusters.
pub const CRD_YAML: &str = include_str!("crd.yaml");
/// Namespace of the Deployments in the central cluster.
pub const CENTRAL_NAMESPACE: &str = "foo";
/// The controller's name: field manager, Event reporter, metrics label.
pub const CONTROLLER: &str = "foo-controller";
/// The finalizer that holds a Foo until its Deployment is dealt with.
pub const FINALIZER: &str = "samplecontroller.k8s.io/multicluster-gc";
/// Annotation on a Foo choosing what its deletion does to the Deployment
/// (`Background` (default), `Foreground` or `Orphan`).
pub const DELETION_POLICY_ANNOTATION: &str = "samplecontroller.k8s.io/deletion-policy";
/// Annotation on a Deployment: the hash of what was last applied (no write when unchanged).
const HASH_ANNOTATION: &str = "samplecontroller.k8s.io/desired-hash";
/// Label on the Deployment's pods.
const INSTANCE_LABEL: &str = "samplecontroller.k8s.io/instance";
/// Longest readable part of a Deployment name (the name is a label value: 63 at most).
const READABLE_MAX: usize = 54;

/// sample-controller's Foo.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment (made unique across clusters by the controller).
    pub deployment_name: String,
    /// Replicas of the Deployment.
    pub replicas: Option<i32>,
}

/// The Foo's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// Available replicas of the Deployment.
    pub available_replicas: i32,
}

/// What the reconciler reads besides the Foo.
pub struct Data {
    /// The central cluster's name in the cluster set.
    pub central: String,
    /// The Deployments in the central cluster.
    pub deployments: Cache<Deployment>,
}

/// Errors of a Foo reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The library could not do what was asked (cluster not Ready, finalizer, GC).
    #[error(transparent)]
    Library(#[from] flotilla_multicluster::Error),
    /// A write failed.
    #[error("{action} failed")]
    Kube {
        /// What was being written.
        action: &'static str,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The Foo has no uid yet.
    #[error(transparent)]
    Owner(#[from] OwnerRefError),
}

/// The Deployment name of the Foo `key`: readable (cluster, namespace, deployment name)
/// and made unique by a hash of the Foo's cluster, namespace and name.
pub fn deployment_name(key: &ObjectKey, deployment: &str) -> String {
    let readable = format!(
        "{}-{}-{}",
        key.cluster,
        key.namespace.as_deref().unwrap_or_default(),
        deployment
    );
    let mut readable: String = readable.chars().take(READABLE_MAX).collect();
    while readable.ends_with(['-', '.']) {
        readable.pop();
    }
    let digest = Sha256::digest(format!("{key}"));
    format!("{readable}-{}", &hex::encode(digest)[..8])
}

/// What is wrong with a Foo's spec, if anything.
pub fn validate(spec: &FooSpec) -> Result<(), String> {
    if spec.deployment_name.trim().is_empty() {
        return Err("spec.deploymentName must be set".into());
    }
    if spec.replicas.is_some_and(|r| r < 0) {
        return Err("spec.replicas must not be negative".into());
    }
    Ok(())
}

/// The policy a Foo's deletion follows.
pub fn deletion_policy(obj: &Foo) -> DeletionPolicy {
    obj.annotations()
        .get(DELETION_POLICY_ANNOTATION)
        .and_then(|v| DeletionPolicy::parse(v))
        .unwrap_or_default()
}

/// The Deployment a Foo wants in the central cluster.
pub fn desired_deployment(obj: &Foo, owner: &MultiClusterOwner, name: &str) -> Deployment {
    let labels = BTreeMap::from([(INSTANCE_LABEL.to_owned(), name.to_owned())]);
    let mut meta = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(CENTRAL_NAMESPACE.to_owned()),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    };
    owner.set_on(&mut meta);
    let mut deployment = Deployment {
        metadata: meta,
        spec: Some(DeploymentSpec {
            replicas: Some(obj.spec.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "nginx".into(),
                        image: Some("nginx:latest".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    let hash = hex::encode(Sha256::digest(
        serde_json::to_vec(&deployment).unwrap_or_default(),
    ));
    deployment
        .annotations_mut()
        .insert(HASH_ANNOTATION.into(), hash);
    deployment
}

/// Whether the central cluster's Deployment differs from the desired one.
pub fn needs_apply(current: Option<&Deployment>, desired: &Deployment) -> bool {
    current.is_none_or(|c| {
        c.annotations().get(HASH_ANNOTATION) != desired.annotations().get(HASH_ANNOTATION)
            || c.meta().deletion_timestamp.is_some()
    })
}

/// Reconciles one Foo.
pub async fn reconcile(obj: Arc<Foo>, ctx: Context<Data>) -> Result<Action, Error> {
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(ctx.finalize(obj.as_ref(), deletion_policy(&obj)).await?);
    }
    if let Err(problem) = validate(&obj.spec) {
        ctx.publish_event(
            obj.as_ref(),
            EventType::Warning,
            "InvalidSpec",
            "Validate",
            problem,
        )
        .await;
        return Ok(Action::await_change());
    }
    // Before any Deployment exists: a Foo deleted from now on waits for its clean-up.
    ctx.ensure_finalizer(obj.as_ref()).await?;
    let central = ctx.data().central.clone();
    let name = deployment_name(ctx.key(), &obj.spec.deployment_name);
    let desired = desired_deployment(&obj, &ctx.owner_ref(obj.as_ref())?, &name);
    let current = ctx
        .data()
        .deployments
        .get(&central, Some(CENTRAL_NAMESPACE), &name);
    if needs_apply(current.as_deref(), &desired) {
        let api: Api<Deployment> = Api::namespaced(ctx.client_of(&central)?, CENTRAL_NAMESPACE);
        api.patch(
            &name,
            &PatchParams::apply(CONTROLLER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(|source| Error::Kube {
            action: "applying the Deployment",
            source,
        })?;
        let (reason, verb) = match current {
            Some(_) => ("DeploymentUpdated", "updated"),
            None => ("DeploymentCreated", "created"),
        };
        let note = format!("Deployment {CENTRAL_NAMESPACE}/{name} {verb} in cluster {central}");
        info!(foo = %ctx.key(), %note);
        ctx.publish_event(obj.as_ref(), EventType::Normal, reason, "Sync", note)
            .await;
    }
    let available = current
        .as_ref()
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    if obj.status.as_ref().map(|s| s.available_replicas) != Some(available) {
        let api: Api<Foo> =
            Api::namespaced(ctx.client().clone(), &obj.namespace().unwrap_or_default());
        let status = serde_json::json!({"status": {"availableReplicas": available}});
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .map_err(|source| Error::Kube {
            action: "writing the Foo's status",
            source,
        })?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// On error: back off per Foo.
pub fn error_policy(_: Arc<Foo>, _: &Error, _: &Context<Data>) -> Action {
    Action::backoff()
}

/// The controller: Foos in every cluster but `central`, their Deployments in `central`.
pub fn controller(set: ClusterSet, central: &str) -> (Controller<Foo>, Cache<Deployment>) {
    let mut controller =
        Controller::<Foo>::new(CONTROLLER, set, WatchOptions::all().except_cluster(central))
            .finalizer(FINALIZER)
            .concurrency(4);
    let deployments = controller.owns::<Deployment>(
        (),
        WatchOptions::all()
            .in_cluster(central)
            .in_namespace(CENTRAL_NAMESPACE),
    );
    (controller, deployments)
}

/// Runs the controller until the future is dropped.
pub async fn run(set: ClusterSet, central: &str, metrics: Option<Arc<ControllerMetrics>>) {
    let (mut controller, deployments) = controller(set, central);
    if let Some(m) = metrics {
        controller = controller.metrics(m);
    }
    let data = Arc::new(Data {
        central: central.to_owned(),
        deployments,
    });
    controller.run(reconcile, error_policy, data).await;
}

/// The Foo CRD.
pub fn crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_saphyr::from_str(CRD_YAML)?)
}

/// Installs the Foo CRD in every cluster but `central` as it turns Ready, and the `foo`
/// namespace in `central`. Runs until dropped.
pub async fn install_on_join(set: ClusterSet, central: String) -> anyhow::Result<()> {
    let crd = crd()?;
    let mut events = set.subscribe();
    let mut pending: Vec<String> = set.ready().into_iter().map(|c| c.name).collect();
    loop {
        for name in pending.drain(..) {
            let Some(client) = set.get(&name).filter(|c| c.ready).and_then(|c| c.client) else {
                continue;
            };
            let params = PatchParams::apply(CONTROLLER).force();
            let result = if name == central {
                let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": CENTRAL_NAMESPACE}});
                Api::<Namespace>::all(client)
                    .patch(CENTRAL_NAMESPACE, &params, &Patch::Apply(ns))
                    .await
                    .map(|_| ())
            } else {
                Api::<CustomResourceDefinition>::all(client)
                    .patch(&crd.name_any(), &params, &Patch::Apply(&crd))
                    .await
                    .map(|_| ())
            };
            match result {
                Ok(()) => info!(cluster = %name, "installed"),
                Err(e) => warn!(cluster = %name, error = %e, "installing failed"),
            }
        }
        match events.recv().await {
            Ok(ClusterEvent::Ready(name)) => pending.push(name),
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                pending = set.ready().into_iter().map(|c| c.name).collect();
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cluster: &str, ns: &str, name: &str) -> ObjectKey {
        ObjectKey {
            cluster: cluster.into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    #[test]
    fn deployment_names_never_collide_across_clusters_and_fit_a_label() {
        let a = deployment_name(&key("member1", "a-b", "c"), "web");
        let b = deployment_name(&key("member1", "a", "b-c"), "web");
        let c = deployment_name(&key("member2", "a-b", "c"), "web");
        assert!(a.starts_with("member1-a-b-web-"), "{a}");
        assert!(a != b && a != c && b != c);
        let long = deployment_name(&key("member1", &"n".repeat(60), "x"), &"d".repeat(60));
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn the_crd_is_samplecontrollers_foo() -> anyhow::Result<()> {
        let crd = crd()?;
        let derived = <Foo as kube::CustomResourceExt>::crd();
        assert_eq!(crd.spec.group, derived.spec.group);
        assert_eq!(crd.spec.names.kind, derived.spec.names.kind);
        assert_eq!(crd.name_any(), derived.name_any());
        Ok(())
    }

    #[test]
    fn a_foo_without_a_deployment_name_or_with_negative_replicas_is_invalid() {
        let spec = |name: &str, replicas| FooSpec {
            deployment_name: name.into(),
            replicas,
        };
        assert!(validate(&spec("web", Some(2))).is_ok());
        assert!(validate(&spec(" ", Some(2))).is_err());
        assert!(validate(&spec("web", Some(-1))).is_err());
    }
}
