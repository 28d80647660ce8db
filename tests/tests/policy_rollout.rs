//! Progressive rollout and drift reporting through a PropagationPolicy, end to end: a plain
//! Deployment applied with `kubectl` to a host that stores templates, selected by a policy
//! whose `rollout` is the same shape as a Federated object's `spec.rollout`. A
//! `kubectl set image` on the native Deployment reaches the members one at a time in the
//! rollout's order (member3 is the canary, KubeFedCluster label `stage=canary`, then the
//! rest by name), each after minSuccessSeconds; `flotilla rollout status` reads the
//! materialised FederatedDeployment; an image that never gets ready halts the rollout after
//! the canary, shown on the host. A policy with `driftPolicy: Report` reports a member
//! change without repairing it. Each scenario has its own namespace on one federation.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, federated::FederatedStatus};
use flotilla_tests::{
    assert::events_about,
    drift::{paths, wait_drift},
    federation::{Federation, federated, federation_for_templates},
    host::FederatedRef,
    member::{config_maps, deployments, first_image},
    scenario,
    scenarios::run_concurrently,
    wait_for,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "policy-rollout";
const NAME: &str = "web";
/// The rollout order: the canary group, then the clusters in no group by name.
const ORDER: [&str; 3] = ["member3", "member1", "member2"];
const MIN_SUCCESS_SECONDS: u64 = 2;
/// Pods scheduled, made ready and counted available on a loaded machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// `kubectl ARGS` against the host, `input` on its standard input.
fn kubectl(fed: &Federation, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    flotilla_tests::kubectl::host(fed, args, input)
}

fn apply(fed: &Federation, ns: &str, yaml: &str) -> anyhow::Result<()> {
    kubectl(fed, &["apply", "-n", ns, "-f", "-"], Some(yaml)).map(|_| ())
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1"}]
"#;

/// The policy: the Deployment everywhere, one cluster at a time, the canary first.
fn rollout_policy(paused: bool) -> String {
    format!(
        r#"
apiVersion: policy.flotilla.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement: {{clusterSelector: {{}}}}
  rollout:
    strategy: Progressive
    maxConcurrency: 1
    groups: [{{selector: {{matchLabels: {{stage: canary}}}}}}]
    minSuccessSeconds: {MIN_SUCCESS_SECONDS}
    progressDeadlineSeconds: 25
    maxFailures: 0
    paused: {paused}
"#
    )
}

#[tokio::test]
async fn a_policy_rolls_out_cluster_by_cluster_and_reports_drift_as_a_federated_object_does()
-> anyhow::Result<()> {
    let fed = federation_for_templates(3).await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let label = json!({"metadata": {"labels": {"stage": "canary"}}});
    clusters
        .patch("member3", &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    let fed = &fed;
    run_concurrently(vec![
        scenario!(a_template_change_rolls_out_through_the_policy(fed)),
        scenario!(a_report_policy_reports_member_changes_and_leaves_them(fed)),
    ])
    .await;
    Ok(())
}

/// The image of the member Deployment in each member, member1 first (None: none there).
async fn images(fed: &Federation) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        let d = deployments(m, NS).get_opt(NAME).await?;
        out.push(d.as_ref().and_then(first_image).map(str::to_string));
    }
    Ok(out)
}

fn member_index(name: &str) -> usize {
    name.trim_start_matches("member")
        .parse::<usize>()
        .unwrap_or(1)
        - 1
}

/// `flotilla -n NS ARGS` against the host, in-process; its output.
async fn flotilla(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let mut in_ns = vec!["-n", NS];
    in_ns.extend_from_slice(args);
    flotilla_tests::cli::run_ok(fed, &in_ns).await
}

async fn wait_reason(web: &FederatedRef, reason: &str) -> anyhow::Result<FederatedStatus> {
    web.wait_rollout(reason, STEP_TIMEOUT)
        .await
        .with_context(|| format!("the rollout {reason}"))
}

async fn a_template_change_rolls_out_through_the_policy(fed: &Federation) -> anyhow::Result<()> {
    kubectl(fed, &["create", "namespace", NS], None)?;
    apply(fed, NS, DEPLOYMENT)?;
    apply(fed, NS, &rollout_policy(false))?;
    let web = FederatedRef::new(&fed.host, &federated("Deployment", "deployments"), NS, NAME);
    wait_reason(&web, "Complete").await?;
    // The first version goes everywhere at once; its copies may still be on their way.
    wait_for(STEP_TIMEOUT, "nginx:1 in every member", || async {
        let now = images(fed).await?;
        ensure!(now == vec![Some("nginx:1".to_string()); 3], "{now:?}");
        Ok(())
    })
    .await?;

    set_image_and_watch_the_order(fed, &web, "nginx:2").await?;
    a_failing_image_halts_after_the_canary(fed, &web).await?;
    set_image_and_watch_the_order(fed, &web, "nginx:3").await?;
    pausing_through_the_policy_holds_the_rest(fed, &web).await
}

/// `kubectl set image` on the native Deployment; the image reaches the members in
/// [`ORDER`], one at a time, while the others keep the previous one; then the rollout is
/// complete, `flotilla rollout status` and `kubectl get` say so, with WaveStarted Events.
async fn set_image_and_watch_the_order(
    fed: &Federation,
    web: &FederatedRef,
    image: &str,
) -> anyhow::Result<()> {
    let before = images(fed).await?;
    kubectl(
        fed,
        &[
            "set",
            "image",
            "-n",
            NS,
            "deployment/web",
            &format!("web={image}"),
        ],
        None,
    )?;
    let started = Instant::now();
    let mut reached: Vec<(&str, Duration)> = Vec::new();
    while reached.len() < ORDER.len() {
        ensure!(started.elapsed() < STEP_TIMEOUT, "reached only {reached:?}");
        let now = images(fed).await?;
        for (i, name) in ORDER.iter().enumerate() {
            let at = member_index(name);
            let has_new = now[at].as_deref() == Some(image);
            if i < reached.len() {
                ensure!(has_new, "{name} lost {image}: {now:?}");
            } else if has_new {
                ensure!(
                    i == reached.len(),
                    "{name} got {image} out of turn: {now:?}"
                );
                reached.push((name, started.elapsed()));
            } else {
                ensure!(
                    now[at] == before[at],
                    "{name} changed before its turn: {now:?}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = wait_reason(web, "Complete").await?;
    let rollout = status.rollout.context("no status.rollout")?;
    ensure!(rollout.progress == "3/3", "{rollout:?}");
    let text = flotilla(
        fed,
        &[
            "rollout",
            "status",
            "deployment/web",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .await?;
    ensure!(text.contains("3/3 clusters done"), "{text}");
    let table = kubectl(fed, &["get", "federateddeployments", "-n", NS, NAME], None)?;
    ensure!(
        table.contains("3/3"),
        "kubectl get shows the progress: {table}"
    );
    ensure!(
        !events_about(&fed.host, NS, NAME, "WaveStarted")
            .await?
            .is_empty(),
        "WaveStarted Events"
    );
    eprintln!("{image} reached the members at {reached:?}");
    Ok(())
}

/// An image whose pods never get ready: the rollout stops after the canary with the
/// member's reason on the host (the FederatedDeployment's Rollout condition, a
/// RolloutFailed Event, `flotilla rollout status` failing), and the other members keep the
/// previous image.
async fn a_failing_image_halts_after_the_canary(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    kubectl(
        fed,
        &[
            "set",
            "image",
            "-n",
            NS,
            "deployment/web",
            "web=fail:never-ready",
        ],
        None,
    )?;
    let status = wait_reason(web, "Failed").await?;
    let c = status.rollout_condition().context("condition")?;
    ensure!(
        c.status == "False" && c.message.contains("cluster member3 failed"),
        "{c:?}"
    );
    let now = images(fed).await?;
    ensure!(
        now == [
            Some("nginx:2".to_string()),
            Some("nginx:2".to_string()),
            Some("fail:never-ready".to_string())
        ],
        "only the canary moved: {now:?}"
    );
    let err = flotilla(
        fed,
        &[
            "rollout",
            "status",
            "deployment/web",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .await
    .err()
    .context("--wait succeeded on a stopped rollout")?;
    ensure!(format!("{err:#}").contains("member3"), "{err:#}");
    ensure!(
        events_about(&fed.host, NS, NAME, "RolloutFailed")
            .await?
            .len()
            == 1,
        "one RolloutFailed Event"
    );
    native_is_not_rolled_out(fed, "a failed rollout")
}

/// `kubectl rollout status` on the host's native Deployment (whose status is the fleet's,
/// summed by the policy controller) does not claim a rollout that stands midway is done.
fn native_is_not_rolled_out(fed: &Federation, when: &str) -> anyhow::Result<()> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host", "rollout", "status", "-n", NS])
        .args(["deployment/web", "--watch=false"])
        .output()
        .context("running kubectl")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        !text.contains("successfully rolled out"),
        "kubectl rollout status on the native Deployment during {when}: {text}"
    );
    Ok(())
}

/// `paused: true` in the policy once the canary has the new image: nothing else moves
/// (across several minSuccessSeconds) and the native Deployment does not read as rolled
/// out; `paused: false` finishes the rollout.
async fn pausing_through_the_policy_holds_the_rest(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    kubectl(
        fed,
        &["set", "image", "-n", NS, "deployment/web", "web=nginx:4"],
        None,
    )?;
    wait_for(STEP_TIMEOUT, "the canary on nginx:4", || async {
        let now = images(fed).await?;
        ensure!(now[2].as_deref() == Some("nginx:4"), "{now:?}");
        Ok(())
    })
    .await?;
    apply(fed, NS, &rollout_policy(true))?;
    wait_reason(web, "Paused").await?;
    let held = images(fed).await?;
    ensure!(
        held[1].as_deref() == Some("nginx:3"),
        "member2 comes last: {held:?}"
    );
    tokio::time::sleep(Duration::from_secs(MIN_SUCCESS_SECONDS * 3)).await;
    ensure!(images(fed).await? == held, "nothing moved while paused");
    // Checked after the rollout is resumed and done, so that a failure here still lets the
    // rest of the scenario run.
    let native = native_is_not_rolled_out(fed, "a paused rollout");
    apply(fed, NS, &rollout_policy(false))?;
    wait_reason(web, "Complete").await?;
    ensure!(images(fed).await? == vec![Some("nginx:4".to_string()); 3]);
    native
}

/// `driftPolicy: Report`: a member's change to a propagated ConfigMap is reported on the
/// materialised FederatedConfigMap (Detected, the field) and left in place.
async fn a_report_policy_reports_member_changes_and_leaves_them(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "policy-drift-report";
    kubectl(fed, &["create", "namespace", ns], None)?;
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
    )?;
    apply(
        fed,
        ns,
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: report}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: settings}]\n  placement: {clusters: [{name: member1}]}\n  driftPolicy: Report\n",
    )?;
    let member = config_maps(&fed.members[0], ns);
    wait_for(STEP_TIMEOUT, "the ConfigMap in member1", || async {
        ensure!(member.get_opt("settings").await?.is_some());
        Ok(())
    })
    .await?;
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    member
        .patch(
            "settings",
            &params,
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    let r = FederatedRef::new(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        ns,
        "settings",
    );
    wait_drift(&r, "member1", "the change reported", |d| {
        ensure!(d.state == "Detected" && paths(d) == ["data.color"], "{d:?}");
        Ok(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cm = member.get("settings").await?;
    let color = cm.data.unwrap_or_default().get("color").cloned();
    ensure!(color.as_deref() == Some("red"), "repaired: {color:?}");
    Ok(())
}

/// docs/policies.md: each namespace's `kube-root-ca.crt` ConfigMap (Kubernetes' own) is
/// never selected, whatever a selector says. Here it exists before any policy selects
/// ConfigMaps, so the policy controller first sees it in its initial list of ConfigMaps.
#[tokio::test]
async fn a_policy_selecting_every_config_map_leaves_kube_root_ca_alone() -> anyhow::Result<()> {
    let fed = federation_for_templates(1).await?;
    let ns = "policy-root-ca";
    kubectl(&fed, &["create", "namespace", ns], None)?;
    let host_cms = config_maps(&fed.host, ns);
    wait_for(STEP_TIMEOUT, "kube-root-ca.crt in the host", || async {
        ensure!(host_cms.get_opt("kube-root-ca.crt").await?.is_some());
        Ok(())
    })
    .await?;
    apply(
        &fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine}\ndata: {k: v}\n",
    )?;
    apply(
        &fed,
        ns,
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: all}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap}]\n  placement: {clusterSelector: {}}\n",
    )?;
    let member = config_maps(&fed.members[0], ns);
    wait_for(STEP_TIMEOUT, "mine in member1", || async {
        ensure!(member.get_opt("mine").await?.is_some());
        Ok(())
    })
    .await?;
    let pps: Api<flotilla_api::policy::PropagationPolicy> = Api::namespaced(fed.host.clone(), ns);
    let status = wait_for(STEP_TIMEOUT, "the policy's status", || async {
        let s = pps.get("all").await?.status.context("no status")?;
        ensure!(s.selected.iter().any(|o| o.name == "mine"), "{s:?}");
        Ok(s)
    })
    .await?;
    let fcms: Api<kube::api::DynamicObject> =
        Api::namespaced_with(fed.host.clone(), ns, &federated("ConfigMap", "configmaps"));
    let made = fcms.get_opt("kube-root-ca.crt").await?.is_some();
    let selected: Vec<&str> = status.selected.iter().map(|o| o.name.as_str()).collect();
    ensure!(
        !made && selected == ["mine"],
        "kube-root-ca.crt taken by a policy: FederatedConfigMap made: {made}, selected {selected:?}"
    );
    Ok(())
}
