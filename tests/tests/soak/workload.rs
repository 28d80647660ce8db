//! The soak's workload: one operation at a time with short pauses, each a seeded random
//! choice among
//!
//! - federated ConfigMaps (`c-N`): create, update, delete, random placement;
//! - progressive rollouts (`web-N`, FederatedDeployments on every member): create, a new
//!   image (a new revision: a rollout starts), delete;
//! - ServiceExports (`svc-N`) in a push member: a Deployment and Service created and
//!   exported, scaled (its endpoints change), or un-exported;
//! - ServiceAccountImports (`sa-N`) in the host, of a push member's ServiceAccount:
//!   created or deleted.
//!
//! Every request is bounded by [`REQUEST_TIMEOUT`]; a failure (an API server or etcd down)
//! is counted, not retried: the next operation goes on.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_api::ServiceAccountImport;
use flotilla_tests::{federation::federated, objects::FederatedObject};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::json;

use super::mcs::exports;
use super::setup::{NS, READER, apply};
use crate::fault_harness::{Rng, apply_fcm, delete_fcm, fcm_api};

/// Every request of the workload and of the checks gives up after this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Federated ConfigMap names drawn from.
const CONFIG_MAPS: u64 = 40;
/// FederatedDeployment names drawn from (each rolled out progressively).
pub const DEPLOYMENTS: u64 = 2;
/// Images drawn from: few, so that a revision comes back (after a delete, too).
const IMAGES: u64 = 4;
/// Exported Service names drawn from.
pub const SERVICES: u64 = 3;
/// ServiceAccountImport names drawn from.
const IMPORTS: u64 = 4;

/// The workload's counts: operations attempted and failed by kind.
#[derive(Debug, Default)]
pub struct Ops {
    /// Attempted, by kind (`configmap create`, `rollout update`, ...).
    pub attempted: BTreeMap<String, u64>,
    /// Failed, by kind.
    pub failed: BTreeMap<String, u64>,
}

impl Ops {
    fn record(&mut self, kind: String, result: anyhow::Result<()>) {
        *self.attempted.entry(kind.clone()).or_default() += 1;
        if result.is_err() {
            *self.failed.entry(kind).or_default() += 1;
        }
    }
}

/// What the workload needs.
pub struct Workload {
    /// The host (admin).
    pub host: Client,
    /// Every member's name.
    pub clusters: Vec<String>,
    /// `(name, admin client)` of the push members.
    pub push: Vec<(String, Client)>,
    /// The seed of its choices.
    pub seed: u64,
}

/// Runs `f` bounded by [`REQUEST_TIMEOUT`].
async fn bounded<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::time::timeout(REQUEST_TIMEOUT, f)
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))?
}

/// Runs operations until `stop`.
pub async fn run(w: Workload, stop: Arc<AtomicBool>) -> Ops {
    let mut rng = Rng::new(w.seed);
    let mut ops = Ops::default();
    let mut revision = 0u64;
    while !stop.load(Ordering::Relaxed) {
        revision += 1;
        let outcome = match rng.range(0, 100) {
            0..60 => config_map(&w, &mut rng, revision).await,
            60..70 => rollout(&w, &mut rng).await,
            70..85 => service_export(&w, &mut rng).await,
            _ => import(&w, &mut rng).await,
        };
        if let Some((kind, result)) = outcome {
            ops.record(kind, result);
        }
        tokio::time::sleep(rng.millis(50, 250)).await;
    }
    ops
}

/// `Some(true)` when it exists and is not being deleted, `Some(false)` when absent, `None`
/// when being deleted (nothing to do); `Err` when it could not be read.
fn live<K: kube::Resource>(found: Option<K>) -> Option<bool> {
    match found {
        Some(o) if o.meta().deletion_timestamp.is_some() => None,
        Some(_) => Some(true),
        None => Some(false),
    }
}

type Outcome = Option<(String, anyhow::Result<()>)>;

async fn config_map(w: &Workload, rng: &mut Rng, revision: u64) -> Outcome {
    let name = format!("c-{}", rng.range(0, CONFIG_MAPS));
    let api = fcm_api(&w.host, NS);
    let existing = match bounded(async { Ok(api.get_opt(&name).await?) }).await {
        Ok(found) => live(found)?,
        Err(e) => return Some(("configmap read".into(), Err(e))),
    };
    let placement: Vec<String> = match rng.range(0, 4) {
        3 => w.clusters.clone(),
        i => vec![w.clusters[i as usize % w.clusters.len()].clone()],
    };
    let data = BTreeMap::from([("rev".to_owned(), revision.to_string())]);
    let (kind, result) = if existing && rng.chance(30) {
        ("delete", bounded(delete_fcm(&w.host, NS, &name)).await)
    } else {
        let kind = if existing { "update" } else { "create" };
        let applied = bounded(apply_fcm(&w.host, NS, &name, &data, &placement)).await;
        (kind, applied)
    };
    Some((format!("configmap {kind}"), result))
}

/// The progressive rollout every `web-N` has: the members one at a time by name.
fn rollout_manifest(name: &str, image: &str) -> serde_json::Value {
    let mut manifest = FederatedObject::deployment(NS, name, 1, image).to_json();
    manifest["spec"]["rollout"] = json!({
        "strategy": "Progressive",
        "maxConcurrency": 1,
        "minSuccessSeconds": 1,
        "progressDeadlineSeconds": 600,
        "maxFailures": 0,
    });
    manifest
}

/// The FederatedDeployment API in [`NS`].
pub fn fd_api(host: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(host.clone(), NS, &federated("Deployment", "deployments"))
}

async fn rollout(w: &Workload, rng: &mut Rng) -> Outcome {
    let name = format!("web-{}", rng.range(0, DEPLOYMENTS));
    let api = fd_api(&w.host);
    let existing = match bounded(async { Ok(api.get_opt(&name).await?) }).await {
        Ok(found) => live(found)?,
        Err(e) => return Some(("rollout read".into(), Err(e))),
    };
    let (kind, result) = if existing && rng.chance(15) {
        let deleted = bounded(async {
            api.delete(&name, &DeleteParams::default()).await?;
            Ok(())
        });
        ("delete", deleted.await)
    } else {
        let image = format!("nginx:{}", rng.range(1, IMAGES + 1));
        let body = rollout_manifest(&name, &image);
        let kind = if existing { "new image" } else { "create" };
        let applied = bounded(async {
            flotilla_tests::federation::apply(
                &w.host,
                &federated("Deployment", "deployments"),
                Some(NS),
                &body,
            )
            .await?;
            Ok(())
        });
        (kind, applied.await)
    };
    Some((format!("rollout {kind}"), result))
}

async fn service_export(w: &Workload, rng: &mut Rng) -> Outcome {
    let name = format!("svc-{}", rng.range(0, SERVICES));
    let (_, member) = &w.push[rng.range(0, w.push.len() as u64) as usize];
    let api = exports(member);
    let existing = match bounded(async { Ok(api.get_opt(&name).await?) }).await {
        Ok(found) => live(found)?,
        Err(e) => return Some(("export read".into(), Err(e))),
    };
    let replicas = rng.range(1, 4) as i32;
    let (kind, result) = if !existing {
        let created = bounded(async {
            deploy(member, &name, replicas).await?;
            apply(
                &api,
                json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                       "metadata": {"name": name, "namespace": NS}}),
            )
            .await
        });
        ("create", created.await)
    } else if rng.chance(40) {
        let deleted = bounded(async {
            api.delete(&name, &DeleteParams::default()).await?;
            Ok(())
        });
        ("delete", deleted.await)
    } else {
        let scaled = bounded(async {
            Api::<Deployment>::namespaced(member.clone(), NS)
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
            Ok(())
        });
        ("scale", scaled.await)
    };
    Some((format!("export {kind}"), result))
}

/// A Deployment of `replicas` pods labelled `app=<name>` and a Service selecting them on
/// port 80 (`http`), the same in every member so exports never conflict.
async fn deploy(member: &Client, name: &str, replicas: i32) -> anyhow::Result<()> {
    let labels = json!({"app": name});
    apply(
        &Api::<Deployment>::namespaced(member.clone(), NS),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
        }),
    )
    .await?;
    apply(
        &Api::<Service>::namespaced(member.clone(), NS),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": labels,
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }),
    )
    .await
}

async fn import(w: &Workload, rng: &mut Rng) -> Outcome {
    let name = format!("sa-{}", rng.range(0, IMPORTS));
    let api: Api<ServiceAccountImport> = Api::namespaced(w.host.clone(), NS);
    let existing = match bounded(async { Ok(api.get_opt(&name).await?) }).await {
        Ok(found) => live(found)?,
        Err(e) => return Some(("import read".into(), Err(e))),
    };
    let (cluster, _) = &w.push[rng.range(0, w.push.len() as u64) as usize];
    let (kind, result) = if existing {
        let deleted = bounded(async {
            api.delete(&name, &DeleteParams::default()).await?;
            Ok(())
        });
        ("delete", deleted.await)
    } else {
        let created = bounded(apply(
            &api,
            json!({"apiVersion": "multicluster.flotilla.io/v1alpha1",
                   "kind": "ServiceAccountImport", "metadata": {"name": name, "namespace": NS},
                   "spec": {"clusterName": cluster, "namespace": NS, "name": READER,
                            "expirationSeconds": 600}}),
        ));
        ("create", created.await)
    };
    Some((format!("import {kind}"), result))
}
