//! kubefedctl muscle memory on real clusters: `federate TYPE NAME --host-cluster-context`,
//! `federate -f FILE` (printed, then `--apply`), `federate --enable-type` for a type not
//! enabled yet, and `enable --federated-group/--federated-version` whose federated objects
//! in that API propagate. One federation serves every step; each uses its own objects.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, FederatedTypeConfig};
use flotilla_cli::{self as cli, Context};
use flotilla_controllers::install;
use flotilla_tests::{
    federation::{Federation, apply},
    member::config_maps,
    objects::{widget_crd, widget_resource},
    wait::wait_object,
    wait_for,
};
use k8s_openapi::{
    api::core::v1::ConfigMap,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::json;

/// The namespace the scenario works in.
pub const NS: &str = "kfd";
const T: Duration = Duration::from_secs(30);

/// Runs `flotilla --kubeconfig <env> ARGS…` in-process (the host context is given by each
/// step, as kubefedctl users do); fails with the output when the command fails.
async fn flotilla(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let mut full: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        fed.env.kubeconfig_path().display().to_string(),
    ];
    full.extend(args.iter().map(|a| a.to_string()));
    let ctx = Context::captured();
    let result = cli::run(full, ctx.clone()).await;
    let out = ctx.out.text();
    result.with_context(|| format!("flotilla {} failed; output:\n{out}", args.join(" ")))?;
    Ok(out)
}

async fn host_config_map(fed: &Federation, name: &str) -> anyhow::Result<()> {
    config_maps(&fed.host, NS)
        .patch(
            name,
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NS}, "data": {"from": "host"}})),
        )
        .await?;
    Ok(())
}

async fn wait_config_map_in_members(fed: &Federation, name: &str, key: &str) -> anyhow::Result<()> {
    for m in &fed.members {
        wait_object(T, &config_maps(m, NS), name, |cm: &ConfigMap| {
            ensure!(
                cm.data.as_ref().is_some_and(|d| d.contains_key(key)),
                "not yet: {:?}",
                cm.data
            );
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// `kubefedctl federate configmaps NAME -n NS --host-cluster-context host`.
async fn federate_with_the_host_cluster_context(fed: &Federation) -> anyhow::Result<()> {
    host_config_map(fed, "plain").await?;
    let args = [
        "federate",
        "configmaps",
        "plain",
        "-n",
        NS,
        "--host-cluster-context",
        "host",
    ];
    let out = flotilla(fed, &args).await?;
    ensure!(
        out.contains(&format!("federatedconfigmap {NS}/plain applied")),
        "{out}"
    );
    wait_config_map_in_members(fed, "plain", "from").await
}

/// `federate -f FILE`: printed like kubefedctl (nothing applied), then `--apply`.
async fn federate_a_file(fed: &Federation) -> anyhow::Result<()> {
    let file = fed.env.kubeconfig_path().with_file_name("resources.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\n  labels:\n    app: web\n\
         data:\n  color: blue\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-file\n\
         spec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n\
         \x20     labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: nginx\n",
    )?;
    let file = file.display().to_string();
    let base = [
        "federate",
        "-f",
        &file,
        "-n",
        NS,
        "--host-cluster-context",
        "host",
    ];
    let out = flotilla(fed, &base).await?;
    for want in [
        "kind: FederatedConfigMap",
        "kind: FederatedDeployment",
        &format!("namespace: {NS}"),
        "clusterSelector: {}",
        "color: blue",
    ] {
        ensure!(out.contains(want), "{want:?} missing:\n{out}");
    }
    ensure!(
        config_maps(&fed.host, NS)
            .get_opt("from-file")
            .await?
            .is_none(),
        "-f without --apply must not write"
    );
    let mut apply_args = base.to_vec();
    apply_args.push("--apply");
    let out = flotilla(fed, &apply_args).await?;
    ensure!(
        out.contains(&format!("federatedconfigmap {NS}/from-file applied"))
            && out.contains(&format!("federateddeployment {NS}/web-file applied")),
        "{out}"
    );
    wait_config_map_in_members(fed, "from-file", "color").await
}

/// `federate --enable-type` for a CRD type nobody enabled: the type is enabled, then the
/// object federated and propagated.
async fn federate_enables_the_type_first(fed: &Federation) -> anyhow::Result<()> {
    let crd = widget_crd(&[])?;
    for client in std::iter::once(&fed.host).chain(&fed.members) {
        install::install_crds(client, std::slice::from_ref(&crd), "flotilla-tests", T).await?;
    }
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(fed.host.clone(), NS, &widget_resource());
    widgets
        .patch(
            "gear",
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "gear", "namespace": NS}, "spec": {"size": 4}})),
        )
        .await?;
    let args = [
        "federate",
        "widgets.example.com",
        "gear",
        "-n",
        NS,
        "--enable-type",
        "--host-cluster-context",
        "host",
    ];
    let out = flotilla(fed, &args).await?;
    ensure!(
        out.contains("federatedtypeconfig kube-federation-system/widgets.example.com applied")
            && out.contains(&format!("federatedwidget {NS}/gear applied")),
        "{out}"
    );
    for m in &fed.members {
        let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), NS, &widget_resource());
        wait_object(T, &api, "gear", |w| {
            ensure!(w.data["spec"]["size"] == 4, "{:?}", w.data);
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// `enable limitranges --federated-group x.example.io --federated-version v1alpha1`: the
/// Federated CRD and the FTC use that API, and objects written in it propagate.
async fn enable_in_another_federated_api(fed: &Federation) -> anyhow::Result<()> {
    let args = [
        "enable",
        "limitranges",
        "--federated-group",
        "x.example.io",
        "--federated-version",
        "v1alpha1",
        "--host-cluster-context",
        "host",
    ];
    let out = flotilla(fed, &args).await?;
    ensure!(
        out.contains("federatedlimitranges.x.example.io applied")
            && out.contains("FederatedLimitRange (x.example.io/v1alpha1)"),
        "{out}"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(fed.host.clone());
    let crd = crds.get("federatedlimitranges.x.example.io").await?;
    ensure!(crd.spec.versions[0].name == "v1alpha1");
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let ftc = ftcs.get("limitranges").await?;
    ensure!(ftc.spec.federated_type.api_version() == "x.example.io/v1alpha1");
    let ar = ApiResource {
        group: "x.example.io".into(),
        version: "v1alpha1".into(),
        api_version: "x.example.io/v1alpha1".into(),
        kind: "FederatedLimitRange".into(),
        plural: "federatedlimitranges".into(),
    };
    let object = json!({
        "apiVersion": "x.example.io/v1alpha1", "kind": "FederatedLimitRange",
        "metadata": {"name": "limits", "namespace": NS},
        "spec": {"template": {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}},
                 "placement": {"clusterSelector": {}}}
    });
    wait_for(T, "FederatedLimitRange accepted", || {
        apply(&fed.host, &ar, Some(NS), &object)
    })
    .await?;
    let limit_ranges = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "LimitRange".into(),
        plural: "limitranges".into(),
    };
    for m in &fed.members {
        let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), NS, &limit_ranges);
        wait_object(T, &api, "limits", |l| {
            ensure!(
                l.data["spec"]["limits"][0]["max"]["cpu"] == "2",
                "{:?}",
                l.data
            );
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// The scenario, in namespace [`NS`] of the shared federation.
pub async fn kubefedctl_style_invocations_work_on_real_clusters(
    fed: &Federation,
) -> anyhow::Result<()> {
    federate_with_the_host_cluster_context(fed).await?;
    federate_a_file(fed).await?;
    federate_enables_the_type_first(fed).await?;
    enable_in_another_federated_api(fed).await?;
    Ok(())
}
