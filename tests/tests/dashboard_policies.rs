//! The dashboard's Policies page on real clusters, through a real headless browser: plain
//! manifests on a host that stores templates, a PropagationPolicy selecting a ConfigMap and
//! a Deployment listed with both objects (linked to their pages), a second, lower-priority
//! policy showing its `LostToPolicy` conflict, an OverridePolicy with what it overrides, the
//! page following a policy change without a reload, and an object page naming the policy
//! that made the object. On a non-loopback address, a caller who may not list policies sees
//! none (and no error), and the viewer role of `config/dashboard/` sees them.
//!
//! The screenshot `dashboard-policies.png` is written beside the clusters' files, and to
//! `docs/images/` with `FLOTILLA_DASHBOARD_SCREENSHOTS=1`.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_cli::Context;
use flotilla_tests::{
    browser::Browser,
    cli::{get_as, service_account_token, start_dashboard, start_dashboard_on},
    federation::{Federation, federation_for_templates},
    wait_for,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "dash-pp";
/// How long the page may take to show a change (policy status written, pushed, refetched).
const SEEN: Duration = Duration::from_secs(90);

const APP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {app: web}}
data: {color: blue}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.example/team/web:1.0}]
"#;

/// The high-priority policy: the Deployment, and the ConfigMap too when `with_config`.
fn web_policy(with_config: bool) -> String {
    let config = if with_config {
        "\n  - {apiVersion: v1, kind: ConfigMap, name: settings}"
    } else {
        ""
    };
    format!(
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: web}}\nspec:\n  priority: 10\n  resourceSelectors:\n  - {{apiVersion: apps/v1, kind: Deployment, name: web}}{config}\n  placement: {{clusterSelector: {{}}}}\n"
    )
}

/// The application's ConfigMaps, at a lower priority.
const FALLBACK: &str = "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: fallback}\nspec:\n  priority: 1\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {app: web}}}]\n  placement: {clusters: [{name: member1}]}\n";

const OVERRIDES: &str = "apiVersion: policy.flotilla.io/v1alpha1\nkind: OverridePolicy\nmetadata: {name: web-member2}\nspec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  overrideRules:\n  - targetCluster: {clusterNames: [member2]}\n    overriders:\n      plaintext: [{path: /spec/replicas, operator: replace, value: 2}]\n";

/// `kubectl ARGS` against the host, `input` on its standard input.
fn kubectl(fed: &Federation, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    flotilla_tests::kubectl::host(fed, args, input)
}

fn apply(fed: &Federation, yaml: &str) -> anyhow::Result<()> {
    kubectl(fed, &["apply", "-n", NS, "-f", "-"], Some(yaml)).map(|_| ())
}

async fn save_screenshot(browser: &Browser, fed: &Federation, file: &str) -> anyhow::Result<()> {
    let png = browser.screenshot().await?;
    ensure!(png.starts_with(b"\x89PNG"), "{file}: not a PNG");
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
    for dir in dirs {
        std::fs::write(dir.join(file), &png).with_context(|| format!("writing {file}"))?;
    }
    Ok(())
}

/// The row of a namespaced policy of `kind` in [`NS`].
fn row(kind: &str, name: &str) -> String {
    format!(r#"#policies tr[data-policy="{kind}/{NS}/{name}"]"#)
}

fn pp_row(name: &str) -> String {
    row("PropagationPolicy", name)
}

async fn marker(browser: &Browser) -> anyhow::Result<serde_json::Value> {
    browser
        .execute("return window.flotillaMarker || null;", vec![])
        .await
}

/// Opened before any policy exists (and marked): the policies appear by themselves, with
/// their objects, the losing policy's conflict and the override policy.
async fn policies_appear_with_their_objects_and_conflicts(
    browser: &Browser,
    fed: &Federation,
) -> anyhow::Result<()> {
    browser.wait_text(SEEN, "#no-policies", |_| true).await?;
    apply(fed, &web_policy(true))?;
    apply(fed, FALLBACK)?;
    apply(fed, OVERRIDES)?;
    browser
        .wait_text(SEEN, &pp_row("web"), |t| {
            t.contains("Ready")
                && t.contains(&format!("Deployment {NS}/web"))
                && t.contains(&format!("ConfigMap {NS}/settings"))
        })
        .await?;
    browser
        .wait_text(SEEN, &format!("{} td.count", pp_row("web")), |t| t == "2")
        .await?;
    let href = browser
        .execute(
            "var a = document.querySelector(arguments[0]); return a ? a.getAttribute('href') : null;",
            vec![json!(format!(
                "{} ul.selected a[href*=FederatedDeployment]",
                pp_row("web")
            ))],
        )
        .await?;
    ensure!(
        href == format!("/object?ns={NS}&kind=FederatedDeployment&name=web"),
        "link {href}"
    );
    let lost = browser
        .wait_text(SEEN, &format!("{} ul.conflicts", pp_row("fallback")), |t| {
            t.contains("LostToPolicy") && t.contains(&format!("ConfigMap {NS}/settings"))
        })
        .await?;
    ensure!(
        lost.contains("web"),
        "the conflict names the winner: {lost:?}"
    );
    browser
        .wait_text(SEEN, &row("OverridePolicy", "web-member2"), |t| {
            t.contains("Ready") && t.contains(&format!("Deployment {NS}/web"))
        })
        .await?;
    ensure!(
        marker(browser).await? == "policies",
        "the page was reloaded"
    );
    Ok(())
}

/// The high-priority policy lets the ConfigMap go: the low-priority one takes it, its
/// conflict disappears, and the page follows without a reload.
async fn a_policy_change_shows_without_a_reload(
    browser: &Browser,
    fed: &Federation,
) -> anyhow::Result<()> {
    apply(fed, &web_policy(false))?;
    let taken = browser
        .wait_text(SEEN, &pp_row("fallback"), |t| {
            t.contains(&format!("ConfigMap {NS}/settings")) && !t.contains("LostToPolicy")
        })
        .await;
    if let Err(e) = taken {
        let policies = kubectl(fed, &["get", "pp", "-n", NS, "-o", "yaml"], None)?;
        anyhow::bail!("{e:#}\nthe policies in the host:\n{policies}");
    }
    browser
        .wait_text(SEEN, &format!("{} td.count", pp_row("web")), |t| t == "1")
        .await?;
    ensure!(
        marker(browser).await? == "policies",
        "the page was reloaded"
    );
    Ok(())
}

/// Each object page names the policy that made it, linked to the policy's row.
async fn object_pages_name_their_policy(browser: &Browser, url: &str) -> anyhow::Result<()> {
    for (kind, name, policy) in [
        ("FederatedDeployment", "web", "web"),
        ("FederatedConfigMap", "settings", "fallback"),
    ] {
        browser
            .goto(&format!("{url}object?ns={NS}&kind={kind}&name={name}"))
            .await?;
        browser
            .wait_text(SEEN, "#made-by", |t| {
                t == format!("PropagationPolicy {NS}/{policy}")
            })
            .await?;
    }
    let href = browser
        .execute(
            "return document.querySelector('#made-by a').getAttribute('href');",
            vec![],
        )
        .await?;
    ensure!(
        href == format!("/policies#PropagationPolicy/{NS}/fallback"),
        "{href}"
    );
    Ok(())
}

#[tokio::test]
async fn the_dashboard_lists_policies_and_the_objects_they_select_in_a_real_browser()
-> anyhow::Result<()> {
    let fed = federation_for_templates(2).await?;
    kubectl(&fed, &["create", "namespace", NS], None)?;
    apply(&fed, APP)?;
    let ctx = Context::captured();
    let url = start_dashboard(&fed, &ctx).await?;
    let browser = Browser::start().await?;
    let steps = async {
        browser.goto(&format!("{url}policies")).await?;
        browser
            .execute("window.flotillaMarker = 'policies'; return null;", vec![])
            .await?;
        policies_appear_with_their_objects_and_conflicts(&browser, &fed).await?;
        browser.resize(1400, 900).await?;
        save_screenshot(&browser, &fed, "dashboard-policies.png").await?;
        // Checked last, so that the other steps still run when the policy controller's
        // status lags behind the change.
        let change = a_policy_change_shows_without_a_reload(&browser, &fed).await;
        object_pages_name_their_policy(&browser, &url).await?;
        only_callers_who_may_list_policies_see_them(&fed).await?;
        change
    }
    .await;
    browser.close().await;
    ctx.shutdown.cancel();
    steps
}

/// The policy rows a caller gets from `/api/policies`.
async fn policies_as(addr: std::net::SocketAddr, token: &str) -> anyhow::Result<Vec<String>> {
    let (status, _, body) = get_as(addr, "/api/policies", Some(token)).await?;
    ensure!(status == 200, "{status}: {body}");
    let doc: serde_json::Value = serde_json::from_str(&body)?;
    Ok(doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["reference"].as_str().map(str::to_owned))
        .collect())
}

/// A dashboard on every address: a ServiceAccount that may read the FederatedDeployments of
/// [`NS`] but not list policies gets the page with no policy on it; one bound to the viewer
/// role sees all three.
async fn only_callers_who_may_list_policies_see_them(fed: &Federation) -> anyhow::Result<()> {
    let apply = PatchParams::apply("flotilla-tests").force();
    let role_yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/dashboard/cluster_role.yaml"),
    )?;
    let role: ClusterRole = serde_saphyr::from_str(&role_yaml)?;
    Api::<ClusterRole>::all(fed.host.clone())
        .patch("flotilla-dashboard-viewer", &apply, &Patch::Apply(&role))
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "dash-pp-viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "flotilla-dashboard-viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": NS}]}))?;
    Api::<ClusterRoleBinding>::all(fed.host.clone())
        .patch("dash-pp-viewer", &apply, &Patch::Apply(&binding))
        .await?;
    let narrow: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deployments-only", "namespace": NS},
        "rules": [{"apiGroups": ["types.kubefed.io"], "resources": ["federateddeployments"],
                   "verbs": ["get"]}]}))?;
    Api::<Role>::namespaced(fed.host.clone(), NS)
        .patch("deployments-only", &apply, &Patch::Apply(&narrow))
        .await?;
    let narrow_binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployments-only", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "deployments-only"},
        "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": NS}]}))?;
    Api::<RoleBinding>::namespaced(fed.host.clone(), NS)
        .patch("deployments-only", &apply, &Patch::Apply(&narrow_binding))
        .await?;
    let viewer = service_account_token(&fed.host, NS, "viewer").await?;
    let narrow = service_account_token(&fed.host, NS, "narrow").await?;
    let ctx = Context::captured();
    let url = start_dashboard_on(fed, &ctx, "0.0.0.0").await?;
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let checks = async {
        let all = wait_for(SEEN, "the viewer to see the three policies", || async {
            let seen = policies_as(addr, &viewer).await?;
            ensure!(seen.len() == 3, "{seen:?}");
            Ok(seen)
        })
        .await?;
        ensure!(
            all.contains(&format!("OverridePolicy/{NS}/web-member2")),
            "{all:?}"
        );
        let none = policies_as(addr, &narrow).await?;
        ensure!(
            none.is_empty(),
            "a caller who may not list policies sees {none:?}"
        );
        let (status, _, page) = get_as(addr, "/policies", Some(&narrow)).await?;
        ensure!(
            status == 200 && page.contains("no-policies"),
            "{status}: {page}"
        );
        Ok(())
    }
    .await;
    ctx.shutdown.cancel();
    checks
}
