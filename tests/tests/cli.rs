//! The `flotilla` command line on real clusters: join / unjoin, enable / disable (a CRD
//! type), federate, orphaning-deletion, status and `status --wait`, the controller-manager
//! (in-process, and two processes under leader election), the deployment manifests against
//! a real API server, and `dev up` as a subprocess that must leave no process behind.
//!
//! Commands run in-process through `flotilla_cli::run` where they can; leader
//! election and `dev up` run the built binary (`cargo build` of `flotilla`, or `$FLOTILLA_BIN`).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, FederatedTypeConfig, KubeFedCluster};
use flotilla_cli::{self as cli, Context};
use flotilla_controllers::install;
use flotilla_tests::{
    LocalEnv,
    federation::{Federation, federated_namespace, federation, install_crds},
    flotilla_binary,
    host::wait_clusters_ready,
    member::config_maps,
    objects::{FederatedObject, create_namespace, string_map, widget_crd, widget_resource},
    wait::{wait_absent, wait_namespace_in, wait_object, wait_present},
    wait_for,
};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const T: Duration = Duration::from_secs(30);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `flotilla --kubeconfig <env> --context host ARGS…` in-process; returns the result
/// and what it printed.
async fn flotilla(env: &LocalEnv, args: &[&str]) -> (anyhow::Result<()>, String) {
    let ctx = Context::captured();
    let result = cli::run(full_args(env, args), ctx.clone()).await;
    (result, ctx.out.text())
}

fn full_args(env: &LocalEnv, args: &[&str]) -> Vec<String> {
    let mut full: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        env.kubeconfig_path().display().to_string(),
        "--context".into(),
        "host".into(),
    ];
    full.extend(args.iter().map(|a| a.to_string()));
    full
}

/// Like [`flotilla`], failing with the output when the command fails.
async fn flotilla_ok(env: &LocalEnv, args: &[&str]) -> anyhow::Result<String> {
    let (result, out) = flotilla(env, args).await;
    result.with_context(|| format!("flotilla {} failed; output:\n{out}", args.join(" ")))?;
    Ok(out)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn metrics_of(port: u16) -> anyhow::Result<String> {
    let (status, body) =
        flotilla_controllers::http_server::get(([127, 0, 0, 1], port).into(), "/metrics").await?;
    ensure!(status == 200, "/metrics answered {status}");
    Ok(body)
}

async fn fast_health_checks(host: &Client) -> anyhow::Result<()> {
    let mut spec = flotilla_api::KubeFedConfigSpec::with_defaults();
    if let Some(hc) = spec.cluster_health_check.as_mut() {
        hc.period = Some("1s".into());
        hc.timeout = Some("1s".into());
    }
    let api: Api<flotilla_api::KubeFedConfig> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    api.patch(
        "kubefed",
        &PatchParams::apply("flotilla-tests").force(),
        &Patch::Apply(json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
            "metadata": {"name": "kubefed", "namespace": DEFAULT_NAMESPACE},
            "spec": spec,
        })),
    )
    .await?;
    Ok(())
}

/// The clusters of the CLI test: the host and the two members.
struct Clusters {
    host: Client,
    m1: Client,
    m2: Client,
}

impl Clusters {
    fn members(&self) -> [&Client; 2] {
        [&self.m1, &self.m2]
    }

    fn kfcs(&self) -> Api<KubeFedCluster> {
        Api::namespaced(self.host.clone(), DEFAULT_NAMESPACE)
    }
}

/// join --dry-run, join of both members (one with its own Secret name), and a second join
/// that fails only with --error-on-existing.
async fn join_both_members(env: &LocalEnv, c: &Clusters) -> anyhow::Result<()> {
    let kfcs = c.kfcs();
    // join --dry-run says what it would create and creates nothing.
    let dry_run = [
        "join",
        "member1",
        "--cluster-context",
        "member1",
        "--dry-run",
    ];
    let plan = flotilla_ok(env, &dry_run).await?;
    assert!(
        plan.contains("ServiceAccount      kube-federation-system/member1-host"),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("apiEndpoint: {}", env.members()[0].server())),
        "{plan}"
    );
    assert!(kfcs.get_opt("member1").await?.is_none());

    // join both members, from their kubeconfig contexts.
    let out = flotilla_ok(
        env,
        &[
            "join",
            "member1",
            "--cluster-context",
            "member1",
            "--host-cluster-context",
            "host",
            "--label",
            "name=member1",
        ],
    )
    .await?;
    assert!(out.contains("cluster member1 joined"), "{out}");
    flotilla_ok(
        env,
        &[
            "join",
            "member2",
            "--cluster-context",
            "member2",
            "--label",
            "name=member2",
            "--secret-name",
            "member2-credentials",
        ],
    )
    .await?;
    let kfc2 = kfcs.get("member2").await?;
    assert_eq!(kfc2.spec.secret_ref.name, "member2-credentials");
    assert_eq!(
        kfc2.labels().get("name").map(String::as_str),
        Some("member2")
    );
    // A second join of a joined cluster fails only when asked to.
    let again = [
        "join",
        "member1",
        "--cluster-context",
        "member1",
        "--error-on-existing",
    ];
    let (again, _) = flotilla(env, &again).await;
    assert!(
        again.is_err(),
        "joining twice with --error-on-existing must fail"
    );
    Ok(())
}

/// Starts the controller-manager in-process, without leader election, serving metrics on
/// a free port; waits until both members are Ready and the metrics say so.
async fn start_controller_manager(
    env: &LocalEnv,
    c: &Clusters,
) -> anyhow::Result<(Context, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let port = free_port()?;
    let ctx = Context::captured();
    let addr = format!("127.0.0.1:{port}");
    let args = [
        "controller-manager",
        "--leader-elect=false",
        "--metrics-addr",
        &addr,
    ];
    let task = tokio::spawn(cli::run(full_args(env, &args), ctx.clone()));
    wait_clusters_ready(T, &c.host, &["member1", "member2"]).await?;
    let metrics = wait_for(T, "metrics with both clusters ready", || async {
        let (status, _) =
            flotilla_controllers::http_server::get(([127, 0, 0, 1], port).into(), "/readyz")
                .await?;
        ensure!(status == 200, "/readyz answered {status}");
        let m = metrics_of(port).await?;
        ensure!(m.contains("flotilla_ready_clusters 2"), "{m}");
        Ok(m)
    })
    .await?;
    assert!(metrics.contains("flotilla_leader 1"), "{metrics}");
    Ok((ctx, task))
}

/// federate a namespace, then a ConfigMap in it (first as YAML only, then applied).
async fn federate_a_namespace_and_a_config_map(env: &LocalEnv, c: &Clusters) -> anyhow::Result<()> {
    create_namespace(&c.host, "demo").await?;
    flotilla_ok(env, &["federate", "namespace", "demo"]).await?;
    wait_namespace_in(&[c.m1.clone(), c.m2.clone()], "demo").await?;
    config_maps(&c.host, "demo")
        .patch(
            "settings",
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "demo", "labels": {"app": "web"}, "annotations": {"note": "host only"}},
                "data": {"color": "blue", "size": "3"}})),
        )
        .await?;
    let args = [
        "federate",
        "configmap",
        "settings",
        "-n",
        "demo",
        "-o",
        "yaml",
    ];
    let yaml = flotilla_ok(env, &args).await?;
    assert!(
        yaml.contains("kind: FederatedConfigMap") && yaml.contains("clusterSelector: {}"),
        "{yaml}"
    );
    assert!(
        !yaml.contains("resourceVersion") && !yaml.contains("note"),
        "{yaml}"
    );
    let settings = FederatedObject::config_map("demo", "settings", json!({})).in_host(&c.host);
    assert!(
        settings.api.get_opt("settings").await?.is_none(),
        "-o yaml must not apply"
    );
    flotilla_ok(env, &["federate", "configmap", "settings", "-n", "demo"]).await?;
    let want = string_map(&[("color", "blue"), ("size", "3")]);
    for m in c.members() {
        let cm = wait_object(T, &config_maps(m, "demo"), "settings", |cm| {
            ensure!(cm.data.as_ref() == Some(&want), "not yet: {:?}", cm.data);
            Ok(())
        })
        .await?;
        assert_eq!(cm.labels().get("app").map(String::as_str), Some("web"));
    }
    Ok(())
}

/// federate --contents: the namespace and what is in it, minus what Kubernetes put there.
async fn federate_a_namespace_with_its_contents(
    env: &LocalEnv,
    c: &Clusters,
) -> anyhow::Result<()> {
    create_namespace(&c.host, "shop").await?;
    config_maps(&c.host, "shop")
        .patch("menu", &PatchParams::apply("flotilla-tests"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "menu", "namespace": "shop"}, "data": {"soup": "yes"}})))
        .await?;
    let args = ["federate", "namespace", "shop", "--contents", "-o", "yaml"];
    let yaml = flotilla_ok(env, &args).await?;
    assert!(
        yaml.contains("kind: FederatedNamespace") && yaml.contains("kind: FederatedConfigMap"),
        "{yaml}"
    );
    assert!(
        yaml.contains("name: menu") && yaml.contains("soup"),
        "{yaml}"
    );
    assert!(!yaml.contains("kube-root-ca.crt"), "{yaml}");
    Ok(())
}

/// status: a row per object and cluster; --wait succeeds once propagated, and fails fast,
/// naming cluster and reason, on an override that cannot apply.
async fn status_reports_rows_and_waits(env: &LocalEnv, c: &Clusters) -> anyhow::Result<()> {
    let args = ["status", "-n", "demo", "--wait", "--timeout", "30s"];
    let out = flotilla_ok(env, &args).await?;
    assert!(out.contains("all propagated"), "{out}");
    let out = flotilla_ok(env, &["status", "-n", "demo"]).await?;
    for object in ["federatedconfigmap/settings", "federatednamespace/demo"] {
        for member in ["member1", "member2"] {
            let rows = out
                .lines()
                .filter(|l| {
                    l.contains(object) && l.contains(member) && l.trim_end().ends_with("OK")
                })
                .count();
            assert_eq!(rows, 1, "one OK row for {object} in {member}:\n{out}");
        }
    }
    let out = flotilla_ok(env, &["status", "cm/settings", "-n", "demo"]).await?;
    assert_eq!(
        out.lines().filter(|l| l.contains("settings")).count(),
        2,
        "{out}"
    );
    // Scripts read the same through -o json, and kubefedctl's host flag is accepted.
    let args = ["status", "cm/settings", "-n", "demo", "-o", "json"];
    let out = flotilla_ok(
        env,
        &[&args[..], &["--host-cluster-context", "host"]].concat(),
    )
    .await?;
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(doc["items"][0]["name"], "settings", "{out}");
    assert_eq!(
        doc["items"][0]["status"]["conditions"][0]["status"], "True",
        "{out}"
    );

    FederatedObject::config_map("demo", "broken", json!({"k": "v"}))
        .override_path("member2", "/data/missing/deeper", json!("x"))
        .apply(&c.host)
        .await?;
    let args = [
        "status",
        "federatedconfigmaps/broken",
        "-n",
        "demo",
        "--wait",
        "--timeout",
        "60s",
    ];
    let (result, out) = flotilla(env, &args).await;
    let error = match result {
        Ok(()) => panic!("a bad override must fail --wait:\n{out}"),
        Err(e) => format!("{e:#}"),
    };
    // It fails on the failure, not on the timeout.
    assert!(
        error.contains("that retrying cannot fix") && !error.contains("not propagated within"),
        "{error}\n{out}"
    );
    assert!(
        out.contains("FAILED") && out.contains("member2") && out.contains("ApplyOverridesFailed"),
        "{out}"
    );
    Ok(())
}

/// orphaning-deletion manages the annotation.
async fn orphaning_deletion_toggles_the_annotation(
    env: &LocalEnv,
    c: &Clusters,
) -> anyhow::Result<()> {
    let verb = |action: &'static str, kind: &'static str| {
        ["orphaning-deletion", action, kind, "settings", "-n", "demo"]
    };
    flotilla_ok(env, &verb("enable", "configmaps")).await?;
    let out = flotilla_ok(env, &verb("status", "fcm")).await?;
    assert!(out.contains("is enabled"), "{out}");
    let settings = FederatedObject::config_map("demo", "settings", json!({})).in_host(&c.host);
    let annotated = settings.get().await?;
    assert_eq!(
        annotated
            .annotations()
            .get("kubefed.io/orphan")
            .map(String::as_str),
        Some("true")
    );
    flotilla_ok(env, &verb("disable", "configmaps")).await?;
    let out = flotilla_ok(env, &verb("status", "configmaps")).await?;
    assert!(out.contains("is disabled"), "{out}");
    Ok(())
}

fn widget(name: &str) -> FederatedObject {
    FederatedObject::new("Widget", "widgets", "demo", name)
        .template(json!({"spec": {"size": 3, "color": "red"}}))
}

/// enable a CRD type: the Federated CRD carries its schema and short name, and
/// propagation works.
async fn enabling_a_crd_type_propagates_its_objects(
    env: &LocalEnv,
    c: &Clusters,
) -> anyhow::Result<()> {
    let crd = widget_crd(&["wd"])?;
    for client in [&c.host, &c.m1, &c.m2] {
        install::install_crds(client, std::slice::from_ref(&crd), "flotilla-tests", T).await?;
    }
    let out = flotilla_ok(env, &["enable", "widgets.example.com"]).await?;
    assert!(out.contains("template schema from the target CRD"), "{out}");
    let crds: Api<CustomResourceDefinition> = Api::all(c.host.clone());
    let fcrd = serde_json::to_value(crds.get("federatedwidgets.types.kubefed.io").await?)?;
    assert_eq!(
        fcrd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/template/properties/spec/properties/size/type"),
        Some(&json!("integer")),
        "the template schema comes from the Widget CRD"
    );
    assert_eq!(
        fcrd.pointer("/spec/names/shortNames/0"),
        Some(&json!("fwd"))
    );
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(c.host.clone(), DEFAULT_NAMESPACE);
    assert!(ftcs.get_opt("widgets.example.com").await?.is_some());
    let gear = widget("gear");
    wait_for(T, "FederatedWidget accepted", || gear.apply(&c.host)).await?;
    for m in c.members() {
        let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), "demo", &widget_resource());
        wait_object(T, &api, "gear", |w| {
            ensure!(w.data["spec"]["size"] == 3, "{:?}", w.data);
            Ok(())
        })
        .await?;
    }
    let out = flotilla_ok(env, &["status", "wd", "-n", "demo"]).await?;
    assert!(
        out.contains("federatedwidget/gear"),
        "a CRD's short name resolves:\n{out}"
    );
    Ok(())
}

/// disable: propagation reported NotRunning before the FTC goes; nothing propagates after.
/// Enabled again, its objects can be deleted; then disable --delete-crd removes the CRD.
async fn disabling_a_crd_type_stops_propagation(
    env: &LocalEnv,
    c: &Clusters,
) -> anyhow::Result<()> {
    let args = ["disable", "widgets.example.com", "--timeout", "30s"];
    let out = flotilla_ok(env, &args).await?;
    assert!(out.contains("NotRunning"), "{out}");
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(c.host.clone(), DEFAULT_NAMESPACE);
    assert!(
        ftcs.get_opt("widgets.example.com").await?.is_none(),
        "FTC deleted"
    );
    let late = widget("late").apply(&c.host).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m1_widgets: Api<DynamicObject> =
        Api::namespaced_with(c.m1.clone(), "demo", &widget_resource());
    assert!(
        m1_widgets.get_opt("late").await?.is_none(),
        "a disabled type does not propagate"
    );
    flotilla_ok(env, &["enable", "widgets.example.com"]).await?;
    wait_present(T, &m1_widgets, "late").await?;
    for name in ["gear", "late"] {
        late.api.delete(name, &DeleteParams::default()).await?;
    }
    wait_for(T, "federated widgets deleted", || async {
        let left = late.api.list(&Default::default()).await?.items;
        ensure!(left.is_empty(), "still there");
        Ok(())
    })
    .await?;
    flotilla_ok(env, &["disable", "fwd", "--delete-crd"]).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.host.clone());
    wait_absent(T, &crds, "federatedwidgets.types.kubefed.io").await?;
    Ok(())
}

/// unjoin removes the member's service account, token, RBAC and the host side; with
/// --force, the host side goes even when the member is down.
async fn unjoin_removes_both_sides(env: &LocalEnv, c: &Clusters) -> anyhow::Result<()> {
    let out = flotilla_ok(env, &["unjoin", "member2", "--cluster-context", "member2"]).await?;
    assert!(out.contains("cluster member2 unjoined"), "{out}");
    let sas: Api<ServiceAccount> = Api::namespaced(c.m2.clone(), DEFAULT_NAMESPACE);
    assert!(
        sas.get_opt("member2-host").await?.is_none(),
        "service account"
    );
    let m2_secrets: Api<Secret> = Api::namespaced(c.m2.clone(), DEFAULT_NAMESPACE);
    assert!(
        m2_secrets.get_opt("member2-host-token").await?.is_none(),
        "member token secret"
    );
    let role = "kubefed-controller-manager:member2-host";
    let roles: Api<ClusterRole> = Api::all(c.m2.clone());
    assert!(roles.get_opt(role).await?.is_none(), "cluster role");
    let bindings: Api<ClusterRoleBinding> = Api::all(c.m2.clone());
    assert!(bindings.get_opt(role).await?.is_none(), "binding");
    let host_secrets: Api<Secret> = Api::namespaced(c.host.clone(), DEFAULT_NAMESPACE);
    assert!(
        host_secrets.get_opt("member2-credentials").await?.is_none(),
        "host secret"
    );
    let kfcs = c.kfcs();
    assert!(kfcs.get_opt("member2").await?.is_none(), "KubeFedCluster");

    env.stop_apiserver("member1").await?;
    let (plain, _) = flotilla(env, &["unjoin", "member1"]).await;
    assert!(
        plain.is_err(),
        "without --force an unreachable member is an error"
    );
    assert!(kfcs.get_opt("member1").await?.is_some());
    let out = flotilla_ok(env, &["unjoin", "member1", "--force"]).await?;
    assert!(out.contains("host side only"), "{out}");
    assert!(kfcs.get_opt("member1").await?.is_none());
    assert!(host_secrets.get_opt("member1-token").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_joins_enables_federates_reports_status_and_unjoins_on_real_clusters()
-> anyhow::Result<()> {
    let env = flotilla_tests::env(2).await;
    let c = Clusters {
        host: env.host().client().await?,
        m1: env.members()[0].client().await?,
        m2: env.members()[1].client().await?,
    };
    install_crds(&c.host).await?;
    join_both_members(&env, &c).await?;
    fast_health_checks(&c.host).await?;
    // enable the two built-in types this test federates.
    for t in ["namespaces", "configmaps"] {
        let out = flotilla_ok(&env, &["enable", t]).await?;
        assert!(out.contains("federatedtypeconfig"), "{out}");
    }
    let (cm_ctx, cm) = start_controller_manager(&env, &c).await?;

    federate_a_namespace_and_a_config_map(&env, &c).await?;
    federate_a_namespace_with_its_contents(&env, &c).await?;
    status_reports_rows_and_waits(&env, &c).await?;
    orphaning_deletion_toggles_the_annotation(&env, &c).await?;
    enabling_a_crd_type_propagates_its_objects(&env, &c).await?;
    disabling_a_crd_type_stops_propagation(&env, &c).await?;
    unjoin_removes_both_sides(&env, &c).await?;

    cm_ctx.shutdown.cancel();
    cm.await?.context("controller-manager")?;
    env.shutdown().await?;
    Ok(())
}

async fn lease_holder(host: &Client) -> anyhow::Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    Ok(api
        .get_opt("kubefed-controller-manager")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

struct ManagerProcess {
    identity: &'static str,
    port: u16,
    child: tokio::process::Child,
}

fn start_manager(
    bin: &Path,
    env: &LocalEnv,
    identity: &'static str,
) -> anyhow::Result<ManagerProcess> {
    let port = free_port()?;
    let log = std::fs::File::create(env.dir().join(format!("{identity}.log")))?;
    let child = tokio::process::Command::new(bin)
        .args(full_args(env, &[]).into_iter().skip(1))
        .args([
            "controller-manager",
            "--identity",
            identity,
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "1s",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting flotilla controller-manager")?;
    Ok(ManagerProcess {
        identity,
        port,
        child,
    })
}

async fn propagated_everywhere(fed: &Federation, name: &str) -> anyhow::Result<()> {
    FederatedObject::config_map("demo", name, json!({ "object": name }))
        .apply(&fed.host)
        .await?;
    for m in &fed.members {
        wait_present(T, &config_maps(m, "demo"), name).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controller_managers_elect_one_leader_and_the_standby_takes_over_when_it_is_killed()
-> anyhow::Result<()> {
    let bin = flotilla_binary()?;
    let mut fed = federation(2).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    federated_namespace(&fed, "demo").await?;

    // The deployment manifests are accepted by a real API server.
    let kubectl = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host", "apply", "-k"])
        .arg(workspace_root().join("config"))
        .arg("--dry-run=server")
        .output();
    match kubectl {
        Ok(out) => assert!(
            out.status.success(),
            "kubectl apply -k config --dry-run=server:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("kubectl not available ({e}); manifests not checked"),
    }

    let mut managers = [
        start_manager(&bin, &fed.env, "manager-a")?,
        start_manager(&bin, &fed.env, "manager-b")?,
    ];
    let leader = wait_for(T, "a leader", || async {
        lease_holder(&fed.host).await?.context("no holder yet")
    })
    .await?;
    let leader_index = managers
        .iter()
        .position(|m| m.identity == leader)
        .context("the holder is one of the two")?;
    let standby_index = 1 - leader_index;
    // Exactly one runs the controllers, and it stays so.
    for _ in 0..3 {
        let (leader_port, standby_port) =
            (managers[leader_index].port, managers[standby_index].port);
        let (l, s) = wait_for(T, "both metrics endpoints", || async {
            Ok((
                metrics_of(leader_port).await?,
                metrics_of(standby_port).await?,
            ))
        })
        .await?;
        assert!(l.contains("flotilla_leader 1"), "leader metrics:\n{l}");
        assert!(s.contains("flotilla_leader 0"), "standby metrics:\n{s}");
        assert_eq!(
            lease_holder(&fed.host).await?.as_deref(),
            Some(leader.as_str())
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    propagated_everywhere(&fed, "before-failover").await?;

    // Kill the leader: the standby takes over within the lease duration (plus a retry).
    managers[leader_index].child.kill().await?;
    let standby = managers[standby_index].identity;
    wait_for(
        Duration::from_secs(20),
        "the standby holds the lease",
        || async {
            ensure!(
                lease_holder(&fed.host).await?.as_deref() == Some(standby),
                "not yet"
            );
            Ok(())
        },
    )
    .await?;
    propagated_everywhere(&fed, "after-failover").await?;

    // SIGTERM: the new leader stops cleanly and releases the lease.
    let pid = managers[standby_index].child.id().context("pid")?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -TERM failed");
    let exit = tokio::time::timeout(T, managers[standby_index].child.wait()).await??;
    assert!(
        exit.success(),
        "a stopped controller-manager exits 0, got {exit:?}"
    );
    assert_eq!(
        lease_holder(&fed.host).await?,
        None,
        "the lease is released"
    );
    Ok(())
}

/// Processes whose command line mentions `needle` (an environment directory).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                found.push(format!("{}: {text}", name.to_string_lossy()));
            }
        }
    }
    found
}

fn working_directory(output: &str) -> anyhow::Result<String> {
    let start = output
        .find("working directory ")
        .context("no working directory printed")?
        + 18;
    let rest = &output[start..];
    Ok(rest[..rest.find(')').context("unterminated")?].to_owned())
}

fn assert_nothing_left(dir: &str) {
    assert!(!Path::new(dir).exists(), "{dir} was not removed");
    let left = processes_mentioning(dir);
    assert!(left.is_empty(), "processes left behind: {left:#?}");
}

/// The dashboard whose URL `dev up` printed lists the samples, propagated.
async fn dashboard_shows_the_samples(printed: &str) -> anyhow::Result<()> {
    let url = printed
        .lines()
        .find_map(|l| {
            l.split_once("dashboard (live, read-only): ")
                .map(|(_, u)| u.trim())
        })
        .with_context(|| format!("no dashboard URL printed:\n{printed}"))?;
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    wait_for(
        Duration::from_secs(30),
        "the dashboard to list the samples",
        || async {
            let (status, body) =
                flotilla_controllers::http_server::get(addr, "/api/overview?ns=demo").await?;
            ensure!(status == 200, "{status}: {body}");
            let doc: serde_json::Value = serde_json::from_str(&body)?;
            let rows = doc["rows"].as_array().context("rows")?;
            ensure!(
                rows.iter()
                    .any(|r| r["name"] == "web" && r["overall"] == "Propagated"),
                "{body}"
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_up_reaches_all_propagated_and_leaves_no_process_behind() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let bin = flotilla_binary()?;
    let out_dir = std::env::temp_dir().join(format!("flotilla-dev-test-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    let kubeconfig = out_dir.join("dev.kubeconfig");

    // --non-interactive: exits 0 by itself once the samples are propagated.
    let run = tokio::process::Command::new(&bin)
        .args([
            "dev",
            "up",
            "--members",
            "2",
            "--non-interactive",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run).await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dev up failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all propagated"), "{stdout}");
    for object in [
        "federateddeployment/web",
        "federatedconfigmap/web-config",
        "federatednamespace/demo",
    ] {
        assert!(
            stdout.lines().any(|l| l.contains(object)
                && l.contains("member2")
                // `OK`, or `OK (5/5 ready)` for a workload once its pods are ready.
                && (l.trim_end().ends_with("OK") || l.contains(" OK ("))),
            "{object} propagated to member2:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("--context member1 get deploy,pods -n demo"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&kubeconfig)?;
    assert!(written.contains("member2"), "{written}");
    assert_nothing_left(&working_directory(&stdout)?);

    // Interactive: runs until SIGINT, then stops everything and exits 0.
    let mut child = tokio::process::Command::new(&bin)
        .args(["dev", "up", "--members", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = String::new();
    let reached = tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(line) = lines.next_line().await? {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("Press Ctrl-C") {
                return Ok(true);
            }
        }
        Ok::<_, std::io::Error>(false)
    })
    .await??;
    assert!(reached && seen.contains("all propagated"), "{seen}");
    dashboard_shows_the_samples(&seen).await?;
    let dir = working_directory(&seen)?;
    assert!(
        !processes_mentioning(&dir).is_empty(),
        "the clusters run while dev up waits"
    );
    let pid = child.id().context("pid")?;
    std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()?;
    let rest = tokio::time::timeout(Duration::from_secs(60), async {
        let mut rest = String::new();
        while let Some(line) = lines.next_line().await? {
            rest.push_str(&line);
            rest.push('\n');
        }
        Ok::<_, std::io::Error>(rest)
    })
    .await??;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await??;
    assert!(status.success(), "dev up after SIGINT: {status:?}\n{rest}");
    assert!(
        rest.contains("every process started here is gone"),
        "{rest}"
    );
    assert_nothing_left(&dir);
    let _ = std::fs::remove_dir_all(&out_dir);
    Ok(())
}

#[test]
fn the_kustomization_installs_every_generated_crd() {
    let root = workspace_root().join("config");
    let kustomization = std::fs::read_to_string(root.join("kustomization.yaml"))
        .expect("config/kustomization.yaml");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("crds"))
        .expect("config/crds")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") && !kustomization.contains(&format!("- crds/{name}")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "add to config/kustomization.yaml: {missing:?}"
    );
}
