//! A complete federation for end-to-end tests: local host + members, the CRDs installed,
//! members joined the way `flotilla join` does, the default type configs applied, and the
//! control plane running in-process.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use flotilla_controllers::{
    install,
    join::{JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};
use flotilla_crds::{DEFAULT_NAMESPACE, crdgen};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
    core::ApiResource,
};
use serde_json::{Value, json};

use crate::{LocalEnv, env, wait_for};

/// A running federation.
pub struct Federation {
    /// Control plane; dropped before the clusters.
    pub control_plane: Option<ControlPlane>,
    /// Host client.
    pub host: Client,
    /// Member clients, in order member1, member2, ...
    pub members: Vec<Client>,
    /// The clusters; dropped last.
    pub env: LocalEnv,
}

impl Drop for Federation {
    fn drop(&mut self) {
        self.control_plane.take();
    }
}

/// Installs every CRD of `crdgen::all_crds()` into a cluster and waits until established.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds = crdgen::all_crds();
    install::install_crds(client, &crds, "flotilla-tests", Duration::from_secs(30)).await?;
    Ok(())
}

/// Applies a JSON/YAML-shaped object with server-side apply through the dynamic API.
pub async fn apply(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    obj: &Value,
) -> anyhow::Result<DynamicObject> {
    let name = obj["metadata"]["name"]
        .as_str()
        .context("object without name")?
        .to_string();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    Ok(api
        .patch(
            &name,
            &PatchParams::apply("flotilla-tests").force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// The kube ApiResource of a federated type, e.g. `federated("ConfigMap", "configmaps")`.
pub fn federated(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: flotilla_crds::TYPES_GROUP.into(),
        version: "v1beta1".into(),
        api_version: "types.kubefed.io/v1beta1".into(),
        kind: format!("Federated{kind}"),
        plural: format!("federated{plural}"),
    }
}

/// Starts host + `members` members with the control plane, every default type enabled,
/// health checked every second. Members are labelled `name=<cluster>`.
pub async fn federation(members: usize) -> anyhow::Result<Federation> {
    let env = env(members).await;
    let host = env.host().client().await?;
    install_crds(&host).await?;
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host.clone());
    ns_api
        .patch(
            DEFAULT_NAMESPACE,
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_NAMESPACE}})),
        )
        .await?;
    let mut config = flotilla_crds::KubeFedConfigSpec::with_defaults();
    if let Some(hc) = config.cluster_health_check.as_mut() {
        hc.period = Some("1s".into());
        hc.timeout = Some("1s".into());
        hc.failure_threshold = Some(2);
    }
    if let Some(sc) = config.sync_controller.as_mut() {
        sc.unready_cluster_deletion_timeout = Some("20s".into());
    }
    let kfc_cfg = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": DEFAULT_NAMESPACE},
        "spec": config,
    });
    let cfg_api: Api<flotilla_crds::KubeFedConfig> =
        Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    cfg_api
        .patch(
            "kubefed",
            &PatchParams::apply("flotilla-tests").force(),
            &Patch::Apply(&kfc_cfg),
        )
        .await?;

    let mut member_clients = Vec::new();
    for m in env.members() {
        let client = m.client().await?;
        let mut opts = JoinOptions::new(m.name(), m.server());
        opts.ca_pem = Some(m.ca_pem().to_string());
        opts.labels.insert("name".into(), m.name().into());
        join(&host, &client, &opts).await?;
        member_clients.push(client);
    }
    let ftc_api: Api<flotilla_crds::FederatedTypeConfig> =
        Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    for t in crdgen::default_target_types() {
        let ftc = crdgen::federated_type_config(&t, DEFAULT_NAMESPACE);
        let name = ftc.metadata.name.clone().context("ftc without name")?;
        ftc_api
            .patch(
                &name,
                &PatchParams::apply("flotilla-tests").force(),
                &Patch::Apply(&ftc),
            )
            .await?;
    }
    let cp = ControlPlane::start(host.clone(), DEFAULT_NAMESPACE, Arc::new(Metrics::new()));
    let set = cp.clusters.clone();
    wait_for(Duration::from_secs(60), "every member Ready", || async {
        let ready = set.ready().len();
        anyhow::ensure!(ready == members, "{ready} of {members} ready");
        Ok(())
    })
    .await?;
    Ok(Federation {
        control_plane: Some(cp),
        host,
        members: member_clients,
        env,
    })
}

/// Creates namespace `ns` in the host and a FederatedNamespace placing it in every member.
pub async fn federated_namespace(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fed.host.clone());
    ns_api
        .patch(
            ns,
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await?;
    apply(
        &fed.host,
        &federated("Namespace", "namespaces"),
        Some(ns),
        &json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"placement": {"clusterSelector": {}}}
        }),
    )
    .await?;
    Ok(())
}
