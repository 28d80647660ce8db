//! The controller-manager as it runs in a host cluster: a separate `flotilla
//! controller-manager` process authenticated as the `flotilla-controller-manager`
//! ServiceAccount with only the RBAC of `config/rbac/`, proving those least-privilege rules
//! are enough to register clusters, elect a leader, propagate, report status and delete.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_tests::{
    federation::{Federation, federated_namespace, federation},
    flotilla_binary,
    host::wait_clusters_ready,
    member::config_map_data,
    objects::FederatedObject,
    wait_for,
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(45);

/// Writes a kubeconfig that authenticates as the `flotilla-controller-manager`
/// ServiceAccount (with a token Secret the host fills in); returns its path.
async fn service_account_kubeconfig(fed: &Federation) -> anyhow::Result<PathBuf> {
    // A token for the controller-manager's ServiceAccount.
    let secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    secrets
        .patch(
            "flotilla-controller-manager-token",
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                "metadata": {"name": "flotilla-controller-manager-token",
                    "annotations": {"kubernetes.io/service-account.name": "flotilla-controller-manager"}}
            })),
        )
        .await?;
    let token = wait_for(T, "service account token", || async {
        let s = secrets.get("flotilla-controller-manager-token").await?;
        let t = s
            .data
            .and_then(|d| d.get("token").cloned())
            .context("no token yet")?;
        Ok(String::from_utf8(t.0)?)
    })
    .await?;
    let host = fed.env.host();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "host", "cluster": {
            "server": host.server(),
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(host.ca_pem()),
        }}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "host", "user": "sa"}}],
    });
    let path = fed.env.dir().join("controller-manager.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&kubeconfig)?)?;
    Ok(path)
}

/// With the controller-manager running: it takes the lease, writes cluster status,
/// propagates with status and deletes, and its log shows no RBAC denial.
async fn the_controller_manager_does_its_job(
    fed: &Federation,
    log_path: &Path,
) -> anyhow::Result<()> {
    flotilla_tests::host::wait_lease_holder(T, &fed.host, "rbac-test").await?;
    // Cluster status written.
    wait_clusters_ready(T, &fed.host, &["member1", "member2"]).await?;
    let frbac = FederatedObject::config_map("demo", "rbac", json!({"k": "v"}))
        .override_path("member2", "/data/k", json!("w"))
        .apply(&fed.host)
        .await?;
    wait_for(T, "propagated with status", || async {
        for (m, want) in fed.members.iter().zip(["v", "w"]) {
            let data = config_map_data(m, "demo", "rbac")
                .await?
                .context("absent")?;
            ensure!(data.get("k").map(String::as_str) == Some(want), "{data:?}");
        }
        frbac.check_propagated().await
    })
    .await?;
    frbac.delete().await?;
    wait_for(T, "deleted everywhere", || async {
        ensure!(
            frbac.api.get_opt("rbac").await?.is_none(),
            "federated object still there"
        );
        for m in &fed.members {
            ensure!(
                config_map_data(m, "demo", "rbac").await?.is_none(),
                "member object still there"
            );
        }
        Ok(())
    })
    .await?;
    let log = std::fs::read_to_string(log_path)?;
    ensure!(
        log.contains("control plane started"),
        "the controllers never started:\n{log}"
    );
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "the controller-manager hit RBAC denials:\n{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_manager_works_with_only_the_rbac_in_config() -> anyhow::Result<()> {
    let bin = flotilla_binary()?;
    let mut fed = federation(2).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    federated_namespace(&fed, "demo").await?;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host", "apply", "-k"])
        .arg(root.join("config/rbac"))
        .output()
        .context("running kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl apply -k config/rbac: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let kubeconfig_path = service_account_kubeconfig(&fed).await?;
    let log_path = fed.env.dir().join("controller-manager.log");
    let mut child = tokio::process::Command::new(&bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig_path)
        .args([
            "controller-manager",
            "--metrics-addr",
            "127.0.0.1:0",
            "--identity",
            "rbac-test",
        ])
        // Debug for Flotilla, so denied Event writes (logged at debug) show too.
        .env("RUST_LOG", "info,flotilla_controllers=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .kill_on_drop(true)
        .spawn()
        .context("starting the controller-manager")?;

    let result = the_controller_manager_does_its_job(&fed, &log_path).await;
    let _ = child.kill().await;
    if result.is_err() {
        eprintln!(
            "controller-manager log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
    result
}
