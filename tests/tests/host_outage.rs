//! The host API server going away for longer than the leader's renew deadline is ridden
//! out in the same process: the controller-manager loses the Lease, stops its controllers,
//! campaigns again, leads again once the host is back and propagates new objects — it
//! never exits (an exit becomes CrashLoopBackOff with minutes of back-off in a cluster).

use std::{process::Stdio, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_tests::{
    federation::{Federation, apply, federated, federated_namespace, federation},
    flotilla_binary, init_tracing, wait_for,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const IDENTITY: &str = "outage-test";

async fn propagate(fed: &Federation, name: &str) -> anyhow::Result<()> {
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"template": {"data": {"k": name}}, "placement": {"clusterSelector": {}}}
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some("demo"),
        &obj,
    )
    .await?;
    for m in &fed.members {
        let cms: Api<ConfigMap> = Api::namespaced(m.clone(), "demo");
        wait_for(T, &format!("{name} in a member"), || async {
            cms.get(name).await?;
            Ok(())
        })
        .await?;
    }
    Ok(())
}

async fn wait_leading(fed: &Federation) -> anyhow::Result<()> {
    flotilla_tests::host::wait_lease_holder(T, &fed.host, IDENTITY).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_outage_longer_than_the_renew_deadline_is_ridden_out_without_exiting()
-> anyhow::Result<()> {
    init_tracing();
    let bin = flotilla_binary()?;
    let mut fed = federation(2).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    federated_namespace(&fed, "demo").await?;
    let log_path = fed.env.dir().join("controller-manager.log");
    let mut child = tokio::process::Command::new(&bin)
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args([
            "--context",
            "host",
            "controller-manager",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--identity",
            IDENTITY,
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
        ])
        .args(["--retry-period", "1s"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .kill_on_drop(true)
        .spawn()
        .context("starting the controller-manager")?;

    let result = async {
        wait_leading(&fed).await?;
        propagate(&fed, "before").await?;

        fed.env.stop_apiserver("host").await?;
        // Longer than the renew deadline: leadership is lost.
        tokio::time::sleep(Duration::from_secs(8)).await;
        ensure!(
            child.try_wait()?.is_none(),
            "the controller-manager exited during the outage"
        );
        fed.env.start_apiserver("host").await?;

        wait_leading(&fed).await?;
        propagate(&fed, "after").await?;
        ensure!(
            child.try_wait()?.is_none(),
            "the controller-manager exited after the outage"
        );
        let log = std::fs::read_to_string(&log_path)?;
        ensure!(
            log.contains("campaigning again"),
            "leadership was never lost, so the outage proved nothing:\n{log}"
        );
        Ok(())
    }
    .await;
    if result.is_err() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        eprintln!("controller-manager log:\n{log}");
    }
    child.kill().await.ok();
    result
}
