//! The web dashboard on real clusters, seen through a real headless browser (Debian's
//! Chromium): `flotilla dashboard` started as the CLI starts it (kubeconfig and context),
//! both members listed Ready, an object with a failing override shown failing on exactly
//! that cluster with its reason (and the controllers' Warning Event on its page), and the
//! object page updating by itself after a template change, without a reload.
//!
//! On a non-loopback address the dashboard asks every caller for a bearer token of the host
//! and shows what the caller's RBAC lets it read.
//!
//! Screenshots of the overview and of an object page are written beside the clusters'
//! files, and to `docs/images/` when `FLOTILLA_DASHBOARD_SCREENSHOTS=1`:
//! `FLOTILLA_DASHBOARD_SCREENSHOTS=1 cargo nextest run -p flotilla-tests -E 'test(/^dashboard/)'`.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_cli::{self as cli, Context};
use flotilla_tests::{
    browser::Browser,
    cli::{get_as, service_account_token, start_dashboard, start_dashboard_on},
    federation::Federation,
    objects::FederatedObject,
    setup::federation_with_namespace,
    wait_for,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "dash";
/// How long the page may take to show a change (status written + pushed + refetched).
const SEEN: Duration = Duration::from_secs(60);

fn settings(name: &str, color: &str) -> FederatedObject {
    FederatedObject::config_map(NS, name, json!({"color": color}))
}

fn screenshot_dirs(fed: &Federation) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fed
        .env
        .kubeconfig_path()
        .parent()
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if std::env::var_os("FLOTILLA_DASHBOARD_SCREENSHOTS").is_some() {
        dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/images"));
    }
    dirs
}

pub(crate) async fn save_screenshot(
    browser: &Browser,
    fed: &Federation,
    file: &str,
) -> anyhow::Result<()> {
    let png = browser.screenshot().await?;
    ensure!(png.starts_with(b"\x89PNG"), "{file}: not a PNG");
    for dir in screenshot_dirs(fed) {
        std::fs::write(dir.join(file), &png).with_context(|| format!("writing {file}"))?;
    }
    Ok(())
}

/// The cell of an object's row in the grid for one cluster.
fn cell(name: &str, cluster: &str) -> String {
    format!(
        r#"#objects tr[data-object="{NS}/FederatedConfigMap/{name}"] td[data-cluster="{cluster}"]"#
    )
}

/// On the overview, opened before the objects were created (and marked): they appear by
/// themselves, without a reload.
async fn overview_shows_clusters_and_the_failing_cell(
    browser: &Browser,
    url: &str,
) -> anyhow::Result<()> {
    for member in ["member1", "member2"] {
        browser
            .wait_text(
                SEEN,
                &format!(r#"#clusters tr[data-cluster="{member}"]"#),
                |t| t.contains("Ready") && !t.contains("NotReady"),
            )
            .await?;
    }
    // Without a reload: the objects were created after the page was opened.
    browser
        .wait_text(SEEN, &cell("broken", "member2"), |t| {
            t.contains("ApplyOverridesFailed")
        })
        .await?;
    let on_member1 = browser
        .wait_text(SEEN, &cell("broken", "member1"), |t| {
            t.contains("Propagated")
        })
        .await?;
    ensure!(
        !on_member1.contains("Failed"),
        "member1 shows {on_member1:?}"
    );
    for member in ["member1", "member2"] {
        browser
            .wait_text(SEEN, &cell("healthy", member), |t| t.contains("Propagated"))
            .await?;
    }
    let counts = browser.text("#counts").await?.unwrap_or_default();
    ensure!(counts.contains("1 failing"), "counts: {counts:?}");
    let marker = browser
        .execute("return window.flotillaMarker || null;", vec![])
        .await?;
    ensure!(
        marker == "overview",
        "the overview was reloaded (marker {marker})"
    );
    // "Only problems" keeps the broken object and drops the healthy one.
    browser.goto(&format!("{url}?ns={NS}&problems=1")).await?;
    browser
        .wait_text(SEEN, "#objects", |t| {
            t.contains("broken") && !t.contains("healthy")
        })
        .await?;
    Ok(())
}

async fn object_page_updates_without_a_reload(
    browser: &Browser,
    fed: &Federation,
    url: &str,
) -> anyhow::Result<()> {
    browser
        .goto(&format!(
            "{url}object?ns={NS}&kind=FederatedConfigMap&name=broken"
        ))
        .await?;
    let row = r#"#object-clusters tr[data-cluster="member2"]"#;
    let text = browser
        .wait_text(SEEN, row, |t| t.contains("ApplyOverridesFailed"))
        .await?;
    ensure!(
        text.contains("/data/missing/deeper"),
        "reason without its message: {text:?}"
    );
    browser
        .wait_text(SEEN, r#"details[data-cluster="member1"] pre"#, |t| {
            t.contains("color: blue")
        })
        .await?;
    // The controllers' Warning Event about the failure, from the Events watch.
    browser
        .wait_text(SEEN, "#events", |t| {
            t.contains("Warning") && t.contains("member2")
        })
        .await?;
    // A marker that a reload would lose.
    browser
        .execute("window.flotillaMarker = 'kept'; return null;", vec![])
        .await?;
    settings("broken", "red")
        .override_op("member2", "replace", "/data/missing/deeper", json!("x"))
        .apply(&fed.host)
        .await?;
    browser
        .wait_text(SEEN, "#template", |t| t.contains("color: red"))
        .await?;
    browser
        .wait_text(SEEN, r#"details[data-cluster="member1"] pre"#, |t| {
            t.contains("color: red")
        })
        .await?;
    let marker = browser
        .execute("return window.flotillaMarker || null;", vec![])
        .await?;
    ensure!(marker == "kept", "the page was reloaded (marker {marker})");
    Ok(())
}

#[tokio::test]
async fn the_dashboard_shows_clusters_and_per_cluster_state_live_in_a_real_browser()
-> anyhow::Result<()> {
    let fed = federation_with_namespace(2, NS).await?;
    let ctx = Context::captured();
    let url = start_dashboard(&fed, &ctx).await?;
    let browser = Browser::start().await?;
    let steps = async {
        browser.goto(&url).await?;
        browser
            .execute("window.flotillaMarker = 'overview'; return null;", vec![])
            .await?;
        settings("healthy", "blue").apply(&fed.host).await?;
        settings("broken", "blue")
            .override_op("member2", "replace", "/data/missing/deeper", json!("x"))
            .apply(&fed.host)
            .await?;
        overview_shows_clusters_and_the_failing_cell(&browser, &url).await?;
        browser.goto(&url).await?;
        browser
            .wait_text(SEEN, &cell("broken", "member2"), |t| {
                t.contains("ApplyOverridesFailed")
            })
            .await?;
        save_screenshot(&browser, &fed, "dashboard-overview.png").await?;
        object_page_updates_without_a_reload(&browser, &fed, &url).await?;
        browser.resize(1400, 1500).await?;
        save_screenshot(&browser, &fed, "dashboard-object.png").await
    }
    .await;
    browser.close().await;
    ctx.shutdown.cancel();
    steps
}

/// The controller-manager's optional endpoint: with `--dashboard-addr` it serves the same
/// dashboard. Here the controller-manager (started as the CLI starts it) replaces the
/// in-process control plane, and its dashboard shows an object propagated to both members;
/// its `/metrics`, on every address as in the Deployment, answers 401 without a token while
/// `/healthz` stays open.
#[tokio::test]
async fn the_controller_manager_serves_the_dashboard_when_asked() -> anyhow::Result<()> {
    const CM_NS: &str = "dash-cm";
    let mut fed = federation_with_namespace(2, CM_NS).await?;
    fed.control_plane.take();
    let free_port = || -> std::io::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (port, metrics_port) = (free_port()?, free_port()?);
    let args: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        fed.env.kubeconfig_path().display().to_string(),
        "--context".into(),
        "host".into(),
        "controller-manager".into(),
        "--leader-elect=false".into(),
        "--metrics-addr".into(),
        // Every address, as in the Deployment: /metrics then needs a token, probes do not.
        format!("0.0.0.0:{metrics_port}"),
        "--dashboard-addr".into(),
        format!("127.0.0.1:{port}"),
    ];
    let ctx = Context::captured();
    let run_ctx = ctx.clone();
    let manager = tokio::spawn(async move { cli::run(args, run_ctx).await });
    FederatedObject::config_map(CM_NS, "served", json!({"k": "v"}))
        .apply(&fed.host)
        .await?;
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let path = format!("/api/object?ns={CM_NS}&kind=FederatedConfigMap&name=served");
    let seen = wait_for(SEEN, "the object propagated on the dashboard", || async {
        let (status, body) = flotilla_controllers::http_server::get(addr, &path).await?;
        ensure!(status == 200, "{status}: {body}");
        let doc: serde_json::Value = serde_json::from_str(&body)?;
        ensure!(doc["overall"] == "Propagated", "{body}");
        Ok(doc)
    })
    .await;
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], metrics_port).into();
    let (metrics_status, _, _) = get_as(metrics, "/metrics", None).await?;
    let (health_status, _, _) = get_as(metrics, "/healthz", None).await?;
    ctx.shutdown.cancel();
    ensure!(
        metrics_status == 401,
        "/metrics without a token: {metrics_status}"
    );
    ensure!(health_status == 200, "/healthz: {health_status}");
    let doc = seen?;
    let states: Vec<&str> = doc["clusters"]
        .as_array()
        .context("clusters")?
        .iter()
        .filter_map(|c| c["cell"]["state"].as_str())
        .collect();
    ensure!(states == ["propagated", "propagated"], "{doc}");
    manager.await??;
    Ok(())
}

const AUTH_NS: &str = "dash-auth";

/// What a caller sees of the overview of `AUTH_NS`: the object names and cluster names.
async fn overview_as(
    addr: std::net::SocketAddr,
    token: &str,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (status, _, body) =
        get_as(addr, &format!("/api/overview?ns={AUTH_NS}"), Some(token)).await?;
    ensure!(status == 200, "{status}: {body}");
    let doc: serde_json::Value = serde_json::from_str(&body)?;
    let names = |list: &serde_json::Value, field: &str| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r[field].as_str().map(str::to_owned))
            .collect()
    };
    Ok((names(&doc["rows"], "name"), names(&doc["clusters"], "name")))
}

/// Binds `config/dashboard/`'s viewer ClusterRole to ServiceAccount `full`, and a Role that
/// reads only FederatedConfigMaps to `narrow`, both in `AUTH_NS`; returns their tokens.
async fn viewers(fed: &Federation) -> anyhow::Result<(String, String)> {
    let apply = PatchParams::apply("flotilla-tests").force();
    let role_yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/dashboard/cluster_role.yaml"),
    )?;
    let mut role: ClusterRole = serde_saphyr::from_str(&role_yaml)?;
    role.metadata.managed_fields = None;
    Api::<ClusterRole>::all(fed.host.clone())
        .patch("flotilla-dashboard-viewer", &apply, &Patch::Apply(&role))
        .await?;
    let subject =
        |name: &str| json!([{"kind": "ServiceAccount", "name": name, "namespace": AUTH_NS}]);
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "dash-auth-full"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "flotilla-dashboard-viewer"},
        "subjects": subject("full")}))?;
    Api::<ClusterRoleBinding>::all(fed.host.clone())
        .patch("dash-auth-full", &apply, &Patch::Apply(&binding))
        .await?;
    let narrow: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "configmaps-only", "namespace": AUTH_NS},
        "rules": [{"apiGroups": ["types.kubefed.io"], "resources": ["federatedconfigmaps"],
                   "verbs": ["get"]}]}))?;
    Api::<Role>::namespaced(fed.host.clone(), AUTH_NS)
        .patch("configmaps-only", &apply, &Patch::Apply(&narrow))
        .await?;
    let narrow_binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "configmaps-only", "namespace": AUTH_NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps-only"},
        "subjects": subject("narrow")}))?;
    Api::<RoleBinding>::namespaced(fed.host.clone(), AUTH_NS)
        .patch("configmaps-only", &apply, &Patch::Apply(&narrow_binding))
        .await?;
    Ok((
        service_account_token(&fed.host, AUTH_NS, "full").await?,
        service_account_token(&fed.host, AUTH_NS, "narrow").await?,
    ))
}

/// Without a token, or with one the host does not know: 401 and a Bearer challenge; the
/// script and `/healthz` need none.
async fn unauthenticated_requests_are_refused(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    for path in ["/", "/api/overview", "/events"] {
        let (status, challenge, _) = get_as(addr, path, None).await?;
        ensure!(status == 401, "{path} without a token: {status}");
        ensure!(
            challenge.is_some_and(|c| c.starts_with("Bearer")),
            "{path}: no challenge"
        );
        let (status, _, _) = get_as(addr, path, Some("not-a-token")).await?;
        ensure!(status == 401, "{path} with a bad token: {status}");
    }
    for path in ["/healthz", "/app.js"] {
        ensure!(
            get_as(addr, path, None).await?.0 == 200,
            "{path} needs no token"
        );
    }
    Ok(())
}

/// Bound to every address (not loopback): no token or an unknown one → 401 with a Bearer
/// challenge; a caller allowed only FederatedConfigMaps sees only those (no Secret, no
/// cluster) and is refused the Secret's page; the viewer role of `config/dashboard/` sees
/// everything; the script and `/healthz` need no token.
#[tokio::test]
async fn a_dashboard_on_a_non_loopback_address_shows_each_caller_what_its_rbac_allows()
-> anyhow::Result<()> {
    let fed = federation_with_namespace(1, AUTH_NS).await?;
    FederatedObject::config_map(AUTH_NS, "shown", json!({"k": "v"}))
        .apply(&fed.host)
        .await?;
    FederatedObject::new("Secret", "secrets", AUTH_NS, "withheld")
        .template(json!({"stringData": {"k": "v"}}))
        .apply(&fed.host)
        .await?;
    let (full, narrow) = viewers(&fed).await?;
    let ctx = Context::captured();
    let url = start_dashboard_on(&fed, &ctx, "0.0.0.0").await?;
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let checks = async {
        unauthenticated_requests_are_refused(addr).await?;
        // The viewer role reads everything: both objects and the FederatedNamespace.
        wait_for(SEEN, "the viewer to see every object", || async {
            let (objects, clusters) = overview_as(addr, &full).await?;
            ensure!(
                objects.len() == 3
                    && ["shown", "withheld", AUTH_NS]
                        .iter()
                        .all(|o| objects.iter().any(|n| n == o))
                    && clusters == ["member1"],
                "{objects:?} {clusters:?}"
            );
            Ok(())
        })
        .await?;
        let (objects, clusters) = overview_as(addr, &narrow).await?;
        ensure!(
            objects == ["shown"] && clusters.is_empty(),
            "narrow sees {objects:?} {clusters:?}"
        );
        let page = |name: &str| format!("/api/object?ns={AUTH_NS}&kind=Federated{name}");
        let (status, _, body) = get_as(
            addr,
            &format!("{}&name=withheld", page("Secret")),
            Some(&narrow),
        )
        .await?;
        ensure!(
            status == 403 && body.contains("federatedsecrets"),
            "{status}: {body}"
        );
        let (status, _, _) = get_as(
            addr,
            &format!("{}&name=shown", page("ConfigMap")),
            Some(&narrow),
        )
        .await?;
        ensure!(status == 200, "narrow's own object: {status}");
        let (status, _, _) = get_as(
            addr,
            &format!("{}&name=withheld", page("Secret")),
            Some(&full),
        )
        .await?;
        ensure!(status == 200, "the viewer role: {status}");
        Ok(())
    }
    .await;
    ctx.shutdown.cancel();
    checks
}
