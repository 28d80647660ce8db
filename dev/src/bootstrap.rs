//! One federation bootstrap on local clusters, for `flotilla dev up`, `flotilla bench` and
//! the end-to-end tests: install the CRDs ([`flotilla_controllers::install`]), the control-plane
//! namespace and the KubeFedConfig, apply the default FederatedTypeConfigs, join every
//! member the way `flotilla join` does (labelled `name=<member>`), and optionally run the
//! control plane in-process until every member is Ready.
//!
//! It owns the order of those steps and their options; it does not start or stop the
//! clusters (the caller owns its [`LocalEnv`] and shuts it down) and prints nothing
//! (progress goes to the caller's callback).

use std::{sync::Arc, time::Duration};

use flotilla_api::{
    DEFAULT_NAMESPACE, FederatedTypeConfig, KUBEFED_CONFIG_NAME, KubeFedConfig, KubeFedConfigSpec,
    core::StatusCollectionMode,
    crdgen::{self, OptionalApi},
    workload::WorkloadKind,
};
use flotilla_localenv::{Cluster, LocalEnv};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use flotilla_controllers::{
    install::{self, InstallError},
    join::{JoinError, JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};

/// How many members [`Bootstrap::federate`] joins at once.
const JOIN_CONCURRENCY: usize = 4;
/// How often a join that failed on a server error is tried (a join is idempotent).
const JOIN_ATTEMPTS: u32 = 4;
/// The pause after a failed join, times the attempt.
const JOIN_RETRY: Duration = Duration::from_secs(2);

/// Whether a join failed on something that passes: a server error (at 100 members on one
/// etcd, "etcdserver: request timed out"), a refused or timed-out connection.
fn transient(e: &JoinError) -> bool {
    match e {
        JoinError::Api { source, .. } => match source {
            kube::Error::Api(status) => status.code >= 500,
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            _ => false,
        },
        _ => false,
    }
}

/// How often [`wait_ready`] looks at the control plane's view of the members.
const READY_POLL: Duration = Duration::from_millis(100);

/// Setting up the federation failed.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// No client could be built for a local cluster.
    #[error("connecting to {cluster}: {source}")]
    Connect {
        /// The cluster.
        cluster: String,
        /// The error.
        #[source]
        source: flotilla_localenv::Error,
    },
    /// The CRDs could not be installed.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// A write to the host failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A member could not be joined.
    #[error("joining {cluster}: {source}")]
    Join {
        /// The member.
        cluster: String,
        /// The error.
        #[source]
        source: JoinError,
    },
    /// The control plane did not see every member Ready in time.
    #[error("only {ready} of {members} members became Ready within {timeout:?}")]
    NotReady {
        /// Members Ready at the deadline.
        ready: usize,
        /// Members joined.
        members: usize,
        /// How long was waited.
        timeout: Duration,
    },
}

/// A step of [`Bootstrap::federate`] that is done, for callers that report progress.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// CRDs, namespace, KubeFedConfig and type configs are in the host.
    Installed {
        /// CRDs installed.
        crds: usize,
        /// FederatedTypeConfigs applied.
        type_configs: usize,
    },
    /// A member is joined.
    Joined {
        /// Its name (also its KubeFedCluster's and its `name` label's value).
        name: &'a str,
        /// Its API endpoint.
        server: &'a str,
    },
}

/// How to set up the federation; each caller's differences are these fields.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// The control-plane namespace in the host (and in the members, by joining).
    pub namespace: String,
    /// Field manager of every server-side apply.
    pub field_manager: String,
    /// How long each CRD may take to become Established.
    pub crd_timeout: Duration,
    /// The KubeFedConfig's spec (health checks, sync workers, ...).
    pub config: KubeFedConfigSpec,
    /// How long the in-process control plane may take to see every member Ready.
    pub ready_timeout: Duration,
    /// Give the workload types' FederatedTypeConfigs (Deployment, ReplicaSet, Job)
    /// `statusCollection: Enabled`, so their federated objects carry the members' status
    /// and `status.aggregated` (default `false`, kubefed's default; `dev up` turns it on).
    pub collect_workload_status: bool,
    /// Also install kubefed's alpha `types.kubefed.k8s.io/v1alpha1` CRDs of the default
    /// types, so alpha manifests are served and reconciled (default `false`, as `config/`:
    /// their plurals are v1beta1's too, and each served alpha type runs a second sync
    /// controller; [`OptionalApi::KubefedAlpha`]).
    pub kubefed_alpha: bool,
    /// Also install Admiralty's `multicluster.admiralty.io` ServiceAccountImport CRD
    /// (default `false`, as `config/`: its plural is Flotilla's import's too;
    /// [`OptionalApi::Admiralty`]).
    pub admiralty_imports: bool,
    /// Join members with their static admin token instead of a ServiceAccount token
    /// ([`JoinOptions::token`]; default `false`): for members started without a
    /// kube-controller-manager, which issue no ServiceAccount token.
    pub member_admin_credentials: bool,
}

/// The federation set up on a [`LocalEnv`]: clients and the KubeFedCluster names.
#[derive(Clone)]
pub struct LocalFederation {
    /// Admin client of the host.
    pub host: Client,
    /// Admin clients of the members, in the environment's order.
    pub members: Vec<Client>,
    /// KubeFedCluster names, in the same order.
    pub cluster_names: Vec<String>,
}

impl Bootstrap {
    /// kubefed's defaults: namespace `kube-federation-system`, the default KubeFedConfig,
    /// 60 s for CRDs and for readiness; writes as `field_manager`.
    pub fn new(field_manager: &str) -> Self {
        Bootstrap {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            field_manager: field_manager.to_owned(),
            crd_timeout: Duration::from_secs(60),
            config: KubeFedConfigSpec::with_defaults(),
            ready_timeout: Duration::from_secs(60),
            collect_workload_status: false,
            kubefed_alpha: false,
            admiralty_imports: false,
            member_admin_credentials: false,
        }
    }

    /// The optional APIs asked for ([`Self::kubefed_alpha`], [`Self::admiralty_imports`]).
    pub fn optional_apis(&self) -> Vec<OptionalApi> {
        OptionalApi::ALL
            .into_iter()
            .filter(|api| match api {
                OptionalApi::KubefedAlpha => self.kubefed_alpha,
                OptionalApi::Admiralty => self.admiralty_imports,
            })
            .collect()
    }

    /// The CRDs installed: those `config/` installs, and those of the optional APIs asked for.
    pub fn crds(&self) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>{
        let mut crds = crdgen::default_crds();
        crds.extend(self.optional_apis().into_iter().flat_map(OptionalApi::crds));
        crds
    }

    /// Installs the host side, then joins every member of `env`, reporting each step.
    pub async fn federate(
        &self,
        env: &LocalEnv,
        mut progress: impl FnMut(Progress<'_>),
    ) -> Result<LocalFederation, BootstrapError> {
        let host = connect(env.host()).await?;
        self.install(&host).await?;
        progress(Progress::Installed {
            crds: self.crds().len(),
            type_configs: crdgen::default_target_types().len(),
        });
        // Joins run a few at a time (each writes to its own member and its own objects in
        // the host): one after the other, 100 members took six minutes. Progress is still
        // reported in member order.
        let mut members = Vec::new();
        let mut cluster_names = Vec::new();
        for batch in env.members().chunks(JOIN_CONCURRENCY) {
            let joins: Vec<_> = batch.iter().map(|m| self.join(&host, m)).collect();
            let joined = futures::future::join_all(joins).await;
            for (member, client) in batch.iter().zip(joined) {
                members.push(client?);
                cluster_names.push(member.name().to_owned());
                progress(Progress::Joined {
                    name: member.name(),
                    server: member.server(),
                });
            }
        }
        Ok(LocalFederation {
            host,
            members,
            cluster_names,
        })
    }

    /// The host side: every CRD (Established), the control-plane namespace, the
    /// KubeFedConfig and a FederatedTypeConfig per default type.
    pub async fn install(&self, host: &Client) -> Result<(), BootstrapError> {
        let crds = self.crds();
        install::install_crds(host, &crds, &self.field_manager, self.crd_timeout).await?;
        let pp = PatchParams::apply(&self.field_manager).force();
        let ns = &self.namespace;
        let namespaces: Api<Namespace> = Api::all(host.clone());
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        namespaces
            .patch(ns, &pp, &Patch::Apply(&namespace))
            .await
            .map_err(api("creating the control-plane namespace"))?;
        let config = json!({
            "apiVersion": format!("{}/{}", flotilla_api::CORE_GROUP, flotilla_api::V1BETA1),
            "kind": "KubeFedConfig",
            "metadata": {"name": KUBEFED_CONFIG_NAME, "namespace": ns},
            "spec": self.config,
        });
        let configs: Api<KubeFedConfig> = Api::namespaced(host.clone(), ns);
        configs
            .patch(KUBEFED_CONFIG_NAME, &pp, &Patch::Apply(&config))
            .await
            .map_err(api("writing the KubeFedConfig"))?;
        let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), ns);
        for t in crdgen::default_target_types() {
            let mut ftc = crdgen::federated_type_config(&t, ns);
            if self.collect_workload_status && WorkloadKind::of(&t.api).is_some() {
                ftc.spec.status_collection = Some(StatusCollectionMode::Enabled);
            }
            let name = ftc.name_any();
            ftcs.patch(&name, &pp, &Patch::Apply(&ftc))
                .await
                .map_err(|source| BootstrapError::Api {
                    action: format!("applying FederatedTypeConfig {name}"),
                    source,
                })?;
        }
        Ok(())
    }

    /// Joins `member` like `flotilla join`, with its CA and the label `name=<member>`;
    /// returns its admin client.
    pub async fn join(&self, host: &Client, member: &Cluster) -> Result<Client, BootstrapError> {
        self.join_as(host, member, member.name()).await
    }

    /// Like [`Bootstrap::join`], registering the member as `name` (a KubeFedCluster named
    /// other than the local cluster, e.g. kubefed's samples' `cluster1`).
    pub async fn join_as(
        &self,
        host: &Client,
        member: &Cluster,
        name: &str,
    ) -> Result<Client, BootstrapError> {
        let client = connect(member).await?;
        let mut opts = JoinOptions::new(name, member.server());
        opts.namespace = self.namespace.clone();
        opts.ca_pem = Some(member.ca_pem().to_owned());
        opts.labels.insert("name".into(), name.into());
        if self.member_admin_credentials {
            opts.token = Some(member.admin_token().to_owned());
        }
        let mut attempt = 1;
        loop {
            match join(host, &client, &opts).await {
                Ok(_) => return Ok(client),
                Err(e) if attempt < JOIN_ATTEMPTS && transient(&e) => {
                    tracing::warn!(cluster = name, attempt, error = %e, "joining failed; trying again");
                    tokio::time::sleep(JOIN_RETRY * attempt).await;
                    attempt += 1;
                }
                Err(source) => {
                    return Err(BootstrapError::Join {
                        cluster: name.to_owned(),
                        source,
                    });
                }
            }
        }
    }

    /// Starts the control plane in this process (on the current runtime) and waits until
    /// it sees all `members` Ready; on timeout it is stopped again.
    pub async fn start_control_plane(
        &self,
        host: &Client,
        members: usize,
    ) -> Result<ControlPlane, BootstrapError> {
        let cp = ControlPlane::start(host.clone(), &self.namespace, Arc::new(Metrics::new()));
        match wait_ready(&cp, members, self.ready_timeout).await {
            Ok(()) => Ok(cp),
            Err(e) => {
                cp.shutdown().await;
                Err(e)
            }
        }
    }
}

/// Waits until `cp` sees `members` members Ready.
pub async fn wait_ready(
    cp: &ControlPlane,
    members: usize,
    timeout: Duration,
) -> Result<(), BootstrapError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Pull clusters are Ready without a client.
        let ready = cp.clusters.snapshot().iter().filter(|c| c.ready).count();
        if ready >= members {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BootstrapError::NotReady {
                ready,
                members,
                timeout,
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

async fn connect(cluster: &Cluster) -> Result<Client, BootstrapError> {
    cluster
        .client()
        .await
        .map_err(|source| BootstrapError::Connect {
            cluster: cluster.name().to_owned(),
            source,
        })
}

fn api(action: &str) -> impl FnOnce(kube::Error) -> BootstrapError + '_ {
    move |source| BootstrapError::Api {
        action: action.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::{JoinError, transient};
    use kube::core::Status;

    fn api(code: u16) -> JoinError {
        JoinError::Api {
            action: "writing".into(),
            side: "member",
            source: kube::Error::Api(Status::failure("no", "r").with_code(code).boxed()),
        }
    }

    #[test]
    fn server_errors_are_tried_again_refusals_are_not() {
        assert!(transient(&api(500)));
        assert!(transient(&api(504)));
        assert!(!transient(&api(403)));
        assert!(!transient(&api(409)));
        assert!(!transient(&JoinError::AlreadyJoined("m".into())));
    }
}
