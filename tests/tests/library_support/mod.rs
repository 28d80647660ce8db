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

/// Writes two exec credential plugins (shell scripts) into `dir`: `good.sh` records the
/// exec info it was given (`dir/exec-info.json`) and prints an ExecCredential with the
/// token in `dir/token`; `bad.sh` prints a would-be secret on stderr and exits 3.
pub fn write_plugins(dir: &std::path::Path, token: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join("token"), token)?;
    let good = "#!/bin/sh\nprintf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$PLUGIN_DIR/exec-info.json\"\n\
        printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$(cat \"$PLUGIN_DIR/token\")\"\n";
    let bad = "#!/bin/sh\necho \"s3cr3t-on-stderr\" >&2\nexit 3\n";
    for (name, text) in [("good.sh", good), ("bad.sh", bad)] {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The exec configuration running `script` of `dir` (see [`write_plugins`]).
pub fn exec_config(dir: &std::path::Path, script: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "client.authentication.k8s.io/v1", "command": dir.join(script),
        "env": [{"name": "PLUGIN_DIR", "value": dir}], "provideClusterInfo": true,
        "interactiveMode": "Never",
    })
}

/// Creates ClusterProfile `name` (cluster manager `another-manager`) in the hub's `default`
/// namespace, offering access provider `provider` to the API server at `server`.
pub async fn put_profile(
    hub: &Client,
    name: &str,
    provider: &str,
    server: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    use base64::Engine as _;
    use flotilla_api::inventory::ClusterProfile;
    let api: Api<ClusterProfile> = Api::namespaced(hub.clone(), "default");
    let profile = serde_json::json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {"name": name, "labels": {"x-k8s.io/cluster-manager": "another-manager"}},
        "spec": {"clusterManager": {"name": "another-manager"}},
    });
    api.create(&Default::default(), &serde_json::from_value(profile)?)
        .await?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let status = serde_json::json!({"status": {"accessProviders": [{"name": provider, "cluster": {
        "server": server, "certificate-authority-data": ca,
    }}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}
