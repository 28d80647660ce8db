#![allow(dead_code)] // Each test binary uses part of this module.
//! What the library's end-to-end tests share: a ConfigMap controller that records which
//! (cluster, namespace, name) it reconciled, and waits on a cluster set.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use flotilla_localenv::testkit::{TimedOut, wait_until};
use flotilla_multicluster::{Action, ClusterSet, Context, Controller};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams},
};

/// How long a step may take on the shared machine.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// The label every ConfigMap of these tests carries (and the controllers select).
pub const TEST_LABEL: &str = "library-test=yes";

/// Keys reconciled so far: (cluster, namespace, name).
pub type Seen = Arc<SeenKeys>;
/// The keys behind [`Seen`].
pub type SeenKeys = Mutex<BTreeSet<(String, String, String)>>;

#[derive(Debug, thiserror::Error)]
#[error("never")]
pub struct Never;

async fn record(cm: Arc<ConfigMap>, ctx: Context<SeenKeys>) -> Result<Action, Never> {
    let key = (
        ctx.cluster().to_owned(),
        cm.metadata.namespace.clone().unwrap_or_default(),
        cm.metadata.name.clone().unwrap_or_default(),
    );
    ctx.data()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key);
    Ok(Action::await_change())
}

/// Runs `controller` with the recording reconciler; returns what it saw and its task.
pub fn run_recording(controller: Controller<ConfigMap>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen = Seen::default();
    let data = seen.clone();
    let task = tokio::spawn(controller.run(record, |_, _, _| Action::backoff(), data));
    (seen, task)
}

/// Waits until `seen` holds (cluster, namespace, name).
pub async fn wait_seen(seen: &Seen, cluster: &str, ns: &str, name: &str) -> Result<(), TimedOut> {
    let key = (cluster.to_owned(), ns.to_owned(), name.to_owned());
    wait_until(TIMEOUT, &format!("{key:?} reconciled"), || async {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&key) {
            Ok(())
        } else {
            Err(format!("seen: {seen:?}"))
        }
    })
    .await
}

/// Waits until cluster `name` of `set` is Ready.
pub async fn wait_ready(set: &ClusterSet, name: &str) -> Result<(), TimedOut> {
    wait_until(TIMEOUT, &format!("cluster {name} Ready"), || async {
        match set.get(name) {
            Some(c) if c.ready => Ok(()),
            other => Err(format!("{other:?}; problems: {:?}", set.problems())),
        }
    })
    .await
}

/// Waits until `set` reports cluster `name` as unusable; returns the reason.
pub async fn wait_problem(set: &ClusterSet, name: &str) -> Result<String, TimedOut> {
    wait_until(TIMEOUT, &format!("cluster {name} reported"), || async {
        set.problems()
            .get(name)
            .cloned()
            .ok_or_else(|| format!("problems: {:?}", set.problems()))
    })
    .await
}

/// Applies a ConfigMap labelled [`TEST_LABEL`] with `labels` more.
pub async fn apply_configmap(
    client: &Client,
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<ConfigMap> {
    let mut all: std::collections::BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    all.insert("library-test".into(), "yes".into());
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(all),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("library-test").force();
    let mut applied = serde_json::to_value(&cm)?;
    applied["apiVersion"] = "v1".into();
    applied["kind"] = "ConfigMap".into();
    Ok(api.patch(name, &params, &Patch::Apply(applied)).await?)
}
