//! A complete federation for end-to-end tests: local host + members, set up by the shared
//! bootstrap of `flotilla_dev::bootstrap` (CRDs, KubeFedConfig, default type
//! configs, members joined the way `flotilla join` does) with the tests' quick health
//! checks, and the control plane running in-process.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_api::crdgen;
use flotilla_controllers::{install, manager::ControlPlane};
use flotilla_dev::bootstrap::Bootstrap;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
    core::ApiResource,
};
use serde_json::{Value, json};

use crate::{EnvOptions, LocalEnv, env_with};
use flotilla_localenv::HostSeed;

/// Field manager of the tests' own writes.
const MANAGER: &str = "flotilla-tests";
/// How long each CRD may take to become Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);

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
    install::install_crds(client, &crds, MANAGER, CRD_TIMEOUT).await?;
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
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// The kube ApiResource of a federated type, e.g. `federated("ConfigMap", "configmaps")`.
/// Only the target's kind and plural name the federated type, so the target's group,
/// version and scope given to crdgen here do not matter.
pub fn federated(kind: &str, plural: &str) -> ApiResource {
    let target = flotilla_api::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        kind: kind.into(),
        plural_name: plural.into(),
        scope: flotilla_api::core::Scope::Namespaced,
    };
    crdgen::federated_api_resource(&target).to_kube()
}

/// The host seed of a federation set up by `boot`: its CRDs as a real apiserver stored them,
/// restored into the next host's storage before it starts (installing CRDs through a v1.20
/// apiserver costs it seconds of CPU; one that finds them stored at start, a fraction). The
/// bootstrap still applies every CRD, which then changes nothing. Named by the CRDs and the
/// field manager, so a changed CRD is never restored from an older copy.
pub fn crd_seed(boot: &Bootstrap) -> HostSeed {
    let crds = serde_json::to_string(&boot.crds()).unwrap_or_default();
    HostSeed {
        name: format!("crds-{:016x}", fnv1a([crds.as_bytes(), MANAGER.as_bytes()])),
        prefixes: vec!["apiextensions.k8s.io/customresourcedefinitions/".into()],
    }
}

/// Local clusters for a federation set up by `boot`, the host's storage seeded with its
/// CRDs when an earlier federation saved them ([`crd_seed`]); install with [`install_host`].
pub async fn seeded_env(options: EnvOptions, boot: &Bootstrap) -> LocalEnv {
    env_with(options.seeded_with(crd_seed(boot))).await
}

/// `boot.install(host)`, then the CRDs saved as the host seed of the next federations if
/// none is saved yet (a failure to save is logged: the next federation installs them).
pub async fn install_host(env: &LocalEnv, boot: &Bootstrap, host: &Client) -> anyhow::Result<()> {
    boot.install(host).await?;
    if let Err(e) = env.save_host_seed().await {
        tracing::warn!(error = %e, "the CRDs' host seed was not saved");
    }
    Ok(())
}

/// 64-bit FNV-1a over `parts`, one after the other: a stable name for content.
fn fnv1a<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.into_iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The tests' federation: health checked every second (unready after two failures), and
/// resources in unready clusters given up after 20 s, so that tests of failures are quick.
pub fn bootstrap() -> Bootstrap {
    let mut boot = Bootstrap::new(MANAGER);
    boot.crd_timeout = CRD_TIMEOUT;
    if let Some(hc) = boot.config.cluster_health_check.as_mut() {
        hc.period = Some("1s".into());
        hc.timeout = Some("1s".into());
        hc.failure_threshold = Some(2);
    }
    if let Some(sc) = boot.config.sync_controller.as_mut() {
        sc.unready_cluster_deletion_timeout = Some("20s".into());
    }
    boot
}

/// Starts host + `members` members with the control plane, every default type enabled,
/// health checked every second. Members are labelled `name=<cluster>`.
pub async fn federation(members: usize) -> anyhow::Result<Federation> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(members), &boot).await;
    federate(env, boot).await
}

/// Like [`federation`], with pods that run (in appearance: a scheduler and a simulated
/// kubelet per member, no containers) and the workload types' status collected, so their
/// federated objects carry `status.aggregated`.
pub async fn federation_with_pods(members: usize) -> anyhow::Result<Federation> {
    let mut boot = bootstrap();
    boot.collect_workload_status = true;
    let env = seeded_env(EnvOptions::with_members(members).with_pods(), &boot).await;
    federate(env, boot).await
}

/// Like [`federation_with_pods`], with a host that holds plain workload manifests as
/// templates for policies: its kube-controller-manager runs no workload controller, so a
/// Deployment applied to it starts no pod there (`EnvOptions::host_workload_controllers`).
pub async fn federation_for_templates(members: usize) -> anyhow::Result<Federation> {
    let mut boot = bootstrap();
    boot.collect_workload_status = true;
    let mut options = EnvOptions::with_members(members).with_pods();
    options.host_workload_controllers = false;
    let env = seeded_env(options, &boot).await;
    federate(env, boot).await
}

/// Like [`federation_with_pods`], with the simulated nodes `pods` describes (e.g. members
/// of different capacity) and KubeFedConfig's `scheduling.unschedulableThreshold` set to
/// `unschedulable_threshold` (a Go duration), so that kubefed's capacity estimate is quick.
pub async fn federation_with_capacity(
    members: usize,
    pods: flotilla_localenv::PodSimulation,
    unschedulable_threshold: &str,
) -> anyhow::Result<Federation> {
    let mut boot = bootstrap();
    boot.collect_workload_status = true;
    boot.config
        .scheduling
        .get_or_insert_with(Default::default)
        .unschedulable_threshold = Some(unschedulable_threshold.to_owned());
    let mut options = EnvOptions::with_members(members);
    options.pods = Some(pods);
    // The host holds plain manifests as templates for policies: it runs none of them.
    options.host_workload_controllers = false;
    let env = seeded_env(options, &boot).await;
    federate(env, boot).await
}

/// [`federation_with_capacity`] of two members of unequal room: member1 has one node of
/// 2 CPUs (4 pods of 500m), member2 one of 8 CPUs (16 pods); the estimate's threshold 5 s.
pub async fn federation_of_2_and_8_cpus() -> anyhow::Result<Federation> {
    let node = |cpu: &str| flotilla_localenv::NodeCapacity {
        cpu: cpu.into(),
        memory: "1Gi".into(),
        pods: "110".into(),
    };
    let pods = flotilla_localenv::PodSimulation::default()
        .with_member("member1", 1, node("2"))
        .with_member("member2", 1, node("8"));
    federation_with_capacity(2, pods, "5s").await
}

/// Installs the host side, joins the members (all at once: each join writes to its own
/// member and its own objects in the host) and starts the control plane.
async fn federate(env: LocalEnv, boot: Bootstrap) -> anyhow::Result<Federation> {
    let started = Instant::now();
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let installed = started.elapsed();
    let members =
        futures::future::try_join_all(env.members().iter().map(|m| boot.join(&host, m))).await?;
    let joined = started.elapsed();
    let cp = boot.start_control_plane(&host, members.len()).await?;
    tracing::info!(
        installed_ms = installed.as_millis() as u64,
        joined_ms = joined.as_millis() as u64,
        ready_ms = started.elapsed().as_millis() as u64,
        "federation ready"
    );
    Ok(Federation {
        control_plane: Some(cp),
        host,
        members,
        env,
    })
}

/// Creates namespace `ns` in the host and a FederatedNamespace placing it in every member.
pub async fn federated_namespace(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fed.host.clone());
    ns_api
        .patch(
            ns,
            &PatchParams::apply(MANAGER),
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
