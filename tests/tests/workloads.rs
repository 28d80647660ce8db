//! Workloads on real clusters with pods that run in appearance (a kube-scheduler and the
//! simulated kubelet of `flotilla-localenv` per member; no container runs): a federated
//! Deployment's pods become Running and Ready, the member Deployments Available, and the
//! host's `status.aggregated` and printer columns sum the clusters — and show a member
//! that goes down and an image whose pods never get ready.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::workload::AggregatedStatus;
use flotilla_tests::{
    federation::{Federation, federated_namespace, federation_with_pods},
    host::FederatedRef,
    member::deployments,
    objects::FederatedObject,
    wait::wait_namespace_in,
    wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};

const NS: &str = "apps";
/// Scheduling, the simulated kubelet and the deployment controller on a loaded machine.
const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// The pods of app `app` in a member: (running and ready, their IPs).
async fn ready_pods(member: &Client, app: &str) -> anyhow::Result<(usize, Vec<String>)> {
    let pods: Api<Pod> = Api::namespaced(member.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    let mut ready = 0;
    let mut ips = Vec::new();
    for pod in &list.items {
        let status = pod.status.as_ref().context("a pod without status")?;
        let is_ready = status.phase.as_deref() == Some("Running")
            && status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
        if is_ready {
            ready += 1;
            ips.push(status.pod_ip.clone().context("a ready pod without an IP")?);
        }
    }
    Ok((ready, ips))
}

/// Waits until the federated object's `status.aggregated` satisfies `check`.
async fn wait_aggregated(
    obj: &FederatedRef,
    what: &str,
    check: impl Fn(&AggregatedStatus) -> bool,
) -> anyhow::Result<AggregatedStatus> {
    wait_for(POD_TIMEOUT, what, || async {
        let status = obj.status().await?;
        let aggregated = status.aggregated.context("no status.aggregated")?;
        ensure!(check(&aggregated), "aggregated is {aggregated:?}");
        Ok(aggregated)
    })
    .await
}

/// `kubectl get federateddeployments -n apps`, as a user sees it.
fn kubectl_get(fed: &Federation) -> anyhow::Result<String> {
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host", "get", "federateddeployments", "-n", NS])
        .output()
        .context("running kubectl")?;
    ensure!(
        output.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The row of `name` in `kubectl get` output, split into columns.
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

async fn setup() -> anyhow::Result<Federation> {
    let fed = federation_with_pods(2).await?;
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;
    Ok(fed)
}

#[tokio::test]
async fn a_federated_deployment_runs_ready_pods_and_its_status_sums_the_clusters()
-> anyhow::Result<()> {
    let fed = setup().await?;
    let web = FederatedObject::deployment(NS, "web", 3, "nginx:1.25")
        .on_clusters(&["member1", "member2"])
        .apply(&fed.host)
        .await?;

    for (i, member) in fed.members.iter().enumerate() {
        let ips = wait_for(POD_TIMEOUT, "3 running, ready pods", || async {
            let (ready, ips) = ready_pods(member, "web").await?;
            ensure!(ready == 3, "{ready} ready pods in member{}", i + 1);
            Ok(ips)
        })
        .await?;
        let unique: BTreeSet<&String> = ips.iter().collect();
        assert_eq!(unique.len(), 3, "pod IPs are unique in a cluster: {ips:?}");
        wait_for(POD_TIMEOUT, "the member Deployment Available", || async {
            let d = deployments(member, NS).get("web").await?;
            let status = d.status.context("no status")?;
            let available = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Available" && c.status == "True");
            ensure!(
                available && status.available_replicas == Some(3),
                "status {status:?}"
            );
            Ok(())
        })
        .await?;
    }

    let all = wait_aggregated(&web, "CLUSTERS 2/2 READY 6/6", |a| {
        a.clusters == "2/2" && a.ready.as_deref() == Some("6/6")
    })
    .await?;
    assert_eq!(all.counts.ready_replicas, Some(6));
    assert_eq!(all.counts.available_replicas, Some(6));
    assert_eq!(all.counts.updated_replicas, Some(6));
    let status = web.status().await?;
    for c in &status.clusters {
        let remote = c.remote_status.as_ref().context("a remote status")?;
        assert_eq!(remote["readyReplicas"], 3, "{}: {remote}", c.name);
    }
    let columns = row(&kubectl_get(&fed)?, "web");
    assert_eq!(
        columns.get(1..4),
        Some(&["2/2", "6/6", "True"].map(String::from)[..])
    );

    fed.env.stop_apiserver("member2").await?;
    wait_aggregated(&web, "CLUSTERS 1/2 READY 3/6 with member2 down", |a| {
        a.clusters == "1/2" && a.ready.as_deref() == Some("3/6")
    })
    .await?;
    let columns = row(&kubectl_get(&fed)?, "web");
    assert_eq!(
        columns.get(1..3),
        Some(&["1/2", "3/6"].map(String::from)[..])
    );
    fed.env.start_apiserver("member2").await?;
    wait_aggregated(&web, "CLUSTERS 2/2 again", |a| {
        a.clusters == "2/2" && a.ready.as_deref() == Some("6/6")
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn pods_of_an_image_that_never_gets_ready_keep_ready_below_desired() -> anyhow::Result<()> {
    let fed = setup().await?;
    let broken = FederatedObject::deployment(NS, "broken", 2, "fail:x")
        .on_clusters(&["member1", "member2"])
        .apply(&fed.host)
        .await?;
    // The pods run (phase Running, with IPs) but never become Ready.
    for member in &fed.members {
        wait_for(POD_TIMEOUT, "2 running pods that are not ready", || async {
            let pods: Api<Pod> = Api::namespaced(member.clone(), NS);
            let list = pods
                .list(&ListParams::default().labels("app=broken"))
                .await?;
            let running = list
                .items
                .iter()
                .filter_map(|p| p.status.as_ref())
                .filter(|s| s.phase.as_deref() == Some("Running") && s.pod_ip.is_some())
                .count();
            ensure!(running == 2, "{running} running pods");
            Ok(())
        })
        .await?;
    }
    let a = wait_aggregated(&broken, "READY 0/4 CLUSTERS 0/2", |a| {
        a.clusters == "0/2" && a.ready.as_deref() == Some("0/4") && a.counts.replicas == Some(4)
    })
    .await?;
    assert_eq!(a.counts.available_replicas, Some(0));
    let columns = row(&kubectl_get(&fed)?, "broken");
    assert_eq!(
        columns.get(1..3),
        Some(&["0/2", "0/4"].map(String::from)[..])
    );

    // A rollout to the same image stays stuck: the new pods never get ready, so no
    // cluster counts as rolled out even though the old pods still serve.
    let web = FederatedObject::deployment(NS, "web", 2, "nginx:1.25")
        .on_clusters(&["member1", "member2"])
        .apply(&fed.host)
        .await?;
    wait_aggregated(&web, "READY 4/4", |a| a.all_ready()).await?;
    FederatedObject::deployment(NS, "web", 2, "fail:x")
        .on_clusters(&["member1", "member2"])
        .apply(&fed.host)
        .await?;
    let stuck = wait_aggregated(&web, "a stuck rollout: CLUSTERS 0/2", |a| {
        a.clusters == "0/2"
    })
    .await?;
    assert!(!stuck.all_ready(), "{stuck:?}");
    Ok(())
}
