//! Each cluster's Kubernetes processes: the apiserver (arguments, spawn, readiness) and the
//! kube-controller-manager (spawn, and proof that its controllers work).

use std::time::{Duration, Instant};

use super::{LocalEnv, PORT_ATTEMPTS, PROBE_INTERVAL, port_conflict};
use crate::cluster::Cluster;
use k8s_openapi::api::core::v1::ServiceAccount;

use super::write;
use crate::error::Error;
use crate::process::{self, Process};
use crate::{kubeconfig, ports};
use tracing::instrument::WithSubscriber as _;

/// Set (to anything) to serve `/debug/pprof` on every API server, for profiling one while a
/// benchmark runs; unset, the API servers do not profile.
pub const PROFILING_ENV: &str = "FLOTILLA_LOCALENV_PROFILING";

impl LocalEnv {
    pub(super) fn apiserver_args(&self, cluster: &Cluster, lean: bool) -> Vec<String> {
        let dir = cluster.dir();
        let file = |name: &str| dir.join(name).display().to_string();
        let mut args = vec![
            format!("--etcd-servers={}", self.etcd_url),
            format!("--etcd-prefix=/{}", cluster.name()),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", cluster.port()),
            // v1.20 also serves plain HTTP on localhost:8080 unless told not to.
            "--insecure-port=0".to_owned(),
            format!("--cert-dir={}", dir.display()),
            format!("--tls-cert-file={}", file("apiserver.crt")),
            format!("--tls-private-key-file={}", file("apiserver.key")),
            format!("--client-ca-file={}", file("ca.crt")),
            format!("--token-auth-file={}", file("tokens.csv")),
            "--authorization-mode=Node,RBAC".to_owned(),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
            format!("--service-account-key-file={}", file("sa.pub")),
            format!("--service-account-signing-key-file={}", file("sa.key")),
            "--api-audiences=https://kubernetes.default.svc".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--max-requests-inflight=200".to_owned(),
            "--max-mutating-requests-inflight=100".to_owned(),
            format!("--profiling={}", std::env::var_os(PROFILING_ENV).is_some()),
        ];
        if lean || !self.options.priority_and_fairness {
            args.push("--enable-priority-and-fairness=false".to_owned());
        }
        if lean {
            // Every 10 s a member would try to write the `kubernetes` Endpoints (refused for
            // a loopback address) and renew its lease: one shared etcd takes that from each.
            args.push("--endpoint-reconciler-type=none".to_owned());
        }
        args.extend(self.options.api_surface.apiserver_args());
        args.extend(self.options.extra_apiserver_args.iter().cloned());
        args
    }

    /// The Go runtime's settings of an apiserver: a lean member's memory limit and `GOGC`,
    /// or the other apiservers' `GOGC`.
    fn apiserver_env(&self, lean: bool) -> Vec<(&'static str, String)> {
        let options = &self.options;
        let (limit, gogc) = if lean {
            (options.lean_memory_limit.clone(), options.lean_gogc)
        } else {
            (None, options.apiserver_gogc)
        };
        let mut env = Vec::new();
        env.extend(limit.map(|limit| ("GOMEMLIMIT", limit)));
        env.extend(gogc.map(|gogc| ("GOGC", gogc.to_string())));
        env
    }

    pub(super) fn spawn_apiserver(&self, index: usize) -> Result<(), Error> {
        let cluster = &self.clusters[index];
        let lean = self.is_lean(index);
        let env = self.apiserver_env(lean);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let apiserver = Process::spawn_with_env(
            format!("apiserver {}", cluster.name()),
            &self.bin_dir.join("kube-apiserver"),
            &self.apiserver_args(cluster, lean),
            &env,
            &cluster.dir().join("apiserver.log"),
        )?;
        tracing::debug!(cluster = %cluster.name(), port = cluster.port(), "apiserver spawned");
        self.lock().apiservers[index] = Some(apiserver);
        Ok(())
    }

    /// Waits for a freshly spawned apiserver; when its port was taken meanwhile, moves the
    /// cluster to another port and tries again.
    pub(super) async fn await_first_apiserver_start(&mut self, index: usize) -> Result<(), Error> {
        let mut attempt = 1;
        loop {
            match self.wait_apiserver_ready(index).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < PORT_ATTEMPTS && port_conflict(&e) => {
                    attempt += 1;
                    let port = ports::free_port()?;
                    tracing::warn!(cluster = %self.clusters[index].name(), port, "apiserver port taken, retrying");
                    self.clusters[index].set_port(port);
                    self.spawn_apiserver(index)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) async fn wait_apiserver_ready(&self, index: usize) -> Result<(), Error> {
        let cluster = &self.clusters[index];
        let mut config = cluster.kube_config();
        // Probes are retried here, on our schedule.
        config.default_retry = false;
        let client = kube::Client::try_from(config).map_err(|source| Error::Client {
            cluster: cluster.name().to_owned(),
            source,
        })?;
        let deadline = Instant::now() + self.options.startup_timeout;
        loop {
            {
                let mut processes = self.lock();
                if let Some(apiserver) = processes.apiservers[index].as_mut()
                    && let Some(status) = apiserver.exit_status()
                {
                    return Err(apiserver.exited_error(status));
                }
            }
            let last_error = match http::Request::get("/readyz").body(Vec::new()) {
                Ok(probe) => {
                    // kube's client logs every refused connection and every 500 at error
                    // level; while starting those are expected, so they stay unlogged.
                    let probe = client
                        .request_text(probe)
                        .with_subscriber(tracing::subscriber::NoSubscriber::default());
                    match tokio::time::timeout(Duration::from_secs(5), probe).await {
                        Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                        Ok(Ok(body)) => body,
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "readiness probe timed out".to_owned(),
                    }
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(Error::StartupTimeout {
                    process: format!("apiserver {}", cluster.name()),
                    timeout: self.options.startup_timeout,
                    last_error,
                    log_tail: process::log_tail(&cluster.dir().join("apiserver.log")),
                });
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    pub(super) fn spawn_controller_manager(&self, index: usize) -> Result<(), Error> {
        let cluster = &self.clusters[index];
        let lean = self.is_lean(index);
        let dir = cluster.dir();
        let config = dir.join("controller-manager.kubeconfig");
        write(&config, &kubeconfig::render(std::slice::from_ref(cluster))?)?;
        let file = |name: &str| dir.join(name).display().to_string();
        let args = vec![
            format!("--kubeconfig={}", config.display()),
            format!("--service-account-private-key-file={}", file("sa.key")),
            format!("--root-ca-file={}", file("ca.crt")),
            format!("--cluster-signing-cert-file={}", file("ca.crt")),
            format!("--cluster-signing-key-file={}", file("ca.key")),
            "--leader-elect=false".to_owned(),
            // v1.20 serves on fixed ports 10252 (HTTP) and 10257 (HTTPS) by default, which
            // would collide between clusters.
            "--port=0".to_owned(),
            "--secure-port=0".to_owned(),
            format!(
                "--controllers={}",
                match (lean, index == 0 && !self.options.host_workload_controllers) {
                    (true, _) => super::LEAN_CONTROLLERS,
                    (false, true) => super::HOST_TEMPLATE_CONTROLLERS,
                    (false, false) => "*",
                }
            ),
            "--kube-api-qps=100".to_owned(),
            "--kube-api-burst=200".to_owned(),
        ];
        let env: &[(&str, &str)] = if lean {
            &[("GOMEMLIMIT", super::LEAN_CONTROLLER_MEMORY_LIMIT)]
        } else {
            &[]
        };
        let controller_manager = Process::spawn_with_env(
            format!("controller-manager {}", cluster.name()),
            &self.bin_dir.join("kube-controller-manager"),
            &args,
            env,
            &dir.join("controller-manager.log"),
        )?;
        self.lock().controller_managers[index] = Some(controller_manager);
        Ok(())
    }

    /// Waits until the `default` service account of namespace `default` has a token
    /// Secret: proof that the service-account and token controllers run, which pods need.
    pub(super) async fn wait_controllers_working(&self, index: usize) -> Result<(), Error> {
        let cluster = &self.clusters[index];
        let client = cluster.client().await?;
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
        let deadline = Instant::now() + self.options.startup_timeout;
        loop {
            {
                let mut processes = self.lock();
                if let Some(controller_manager) = processes.controller_managers[index].as_mut()
                    && let Some(status) = controller_manager.exit_status()
                {
                    return Err(controller_manager.exited_error(status));
                }
            }
            let last_error = match accounts.get_opt("default").await {
                Ok(Some(account)) if account.secrets.as_ref().is_some_and(|s| !s.is_empty()) => {
                    return Ok(());
                }
                Ok(Some(_)) => "service account default has no token yet".to_owned(),
                Ok(None) => "no service account default yet".to_owned(),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(Error::StartupTimeout {
                    process: format!("controller-manager {}", cluster.name()),
                    timeout: self.options.startup_timeout,
                    last_error,
                    log_tail: process::log_tail(&cluster.dir().join("controller-manager.log")),
                });
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}
