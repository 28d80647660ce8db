//! The control plane under test: in this process on its own Tokio runtime (threads named
//! [`CP_THREAD`], so that its CPU time can be read per thread), or as a child
//! `flotilla controller-manager`. It starts, waits for readiness and stops it; measuring is
//! left to the phases.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster};
use flotilla_localenv::{Cluster, LocalEnv, Process};
use kube::{Api, Client, api::ListParams};
use tracing::warn;

use super::{CP_THREAD, run::Run};
use flotilla_controllers::{manager::ControlPlane, metrics::Metrics};

/// How long stopping the in-process control plane waits for its threads.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The control plane under test.
pub(super) enum RunningControlPlane {
    /// On its own runtime in this process.
    InProcess(InProcessControlPlane),
    /// A child process, spawned like the clusters' processes (it dies with this one, even
    /// when this one is killed outright); dropping it kills it.
    Child { process: Process, log: PathBuf },
}

impl RunningControlPlane {
    /// Starts the control plane: in-process without `binary`, else that binary's
    /// `controller-manager` (leader election off) against the host.
    pub(super) fn start(env: &LocalEnv, binary: Option<&Path>) -> anyhow::Result<Self> {
        let Some(binary) = binary else {
            return Ok(RunningControlPlane::InProcess(
                InProcessControlPlane::start(env.host())?,
            ));
        };
        let log = env.dir().join("controller-manager.log");
        let args: Vec<String> = [
            "--kubeconfig",
            &env.kubeconfig_path().display().to_string(),
            "--context",
            "host",
            "controller-manager",
            "--leader-elect=false",
            "--metrics-addr",
            "127.0.0.1:0",
        ]
        .map(str::to_owned)
        .into();
        let process = Process::spawn("controller-manager", binary, &args, &log)
            .with_context(|| format!("starting {} controller-manager", binary.display()))?;
        Ok(RunningControlPlane::Child { process, log })
    }

    /// Where it runs and how its cost is attributed, for the report.
    pub(super) fn describe(&self) -> String {
        match self {
            RunningControlPlane::InProcess(_) => format!(
                "in-process on its own runtime (threads {CP_THREAD}*: CPU per thread; RSS = the process's peak growth, an upper bound)"
            ),
            RunningControlPlane::Child { .. } => {
                "child process `flotilla controller-manager` (CPU and peak RSS of that process)"
                    .into()
            }
        }
    }

    /// Waits until the control plane sees every member Ready.
    pub(super) async fn wait_ready(&mut self, run: &Run) -> anyhow::Result<()> {
        self.wait_ready_for(&run.host, run.members.len(), run.timeout)
            .await
    }

    /// Waits until the control plane sees `members` members Ready, through `host`.
    pub(super) async fn wait_ready_for(
        &mut self,
        host: &Client,
        members: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let api: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
        loop {
            let ready = match self {
                RunningControlPlane::InProcess(cp) => cp.ready(),
                RunningControlPlane::Child { process, log } => {
                    if let Some(status) = process.exit_status() {
                        bail!(
                            "the controller-manager exited ({status}):\n{}",
                            log_tail(log, 20)
                        );
                    }
                    ready_in_host(&api).await?
                }
            };
            if ready >= members {
                return Ok(());
            }
            // A large fleet on a small machine takes its time (every member's first lists
            // at once): the phase timeout bounds it, two minutes at least.
            if started.elapsed() > timeout.max(Duration::from_secs(120)) {
                bail!("only {ready} of {members} members turned Ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The pid of the control plane's own process, when it has one.
    pub(super) fn child_pid(&self) -> Option<u32> {
        match self {
            RunningControlPlane::InProcess(_) => None,
            RunningControlPlane::Child { process, .. } => Some(process.pid()),
        }
    }

    /// Peak RSS of the control plane's own process, when it has one.
    pub(super) fn own_peak_rss_mib(&self) -> Option<f64> {
        let pid = self.child_pid()?;
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: f64 = s
            .lines()
            .find(|l| l.starts_with("VmHWM:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    /// CPU seconds of the control plane so far: its process's, or its runtime's threads'.
    pub(super) fn cpu_s(&self) -> f64 {
        match self.child_pid() {
            Some(pid) => super::procfs::cpu_of(&format!("/proc/{pid}/stat")),
            None => super::procfs::threads_cpu(CP_THREAD),
        }
    }

    /// The control plane's RSS now, MiB: its process's, or (in-process) this whole
    /// process's, an upper bound.
    pub(super) fn rss_mib(&self) -> f64 {
        let Some(pid) = self.child_pid() else {
            return super::procfs::rss_mib();
        };
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<f64>().ok()
            })
            .map_or(0.0, |kib| kib / 1024.0)
    }

    /// Stops it.
    pub(super) async fn stop(self) {
        match self {
            RunningControlPlane::InProcess(cp) => cp.stop().await,
            // Dropping the process kills it and waits for it.
            RunningControlPlane::Child { process, .. } => drop(process),
        }
    }
}

/// The control plane on its own runtime, so that its threads (and CPU time) are its own.
pub(super) struct InProcessControlPlane {
    cp: Option<ControlPlane>,
    rt: Option<tokio::runtime::Runtime>,
}

impl InProcessControlPlane {
    fn start(host: &Cluster) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name(CP_THREAD)
            // Threads that exit take their CPU time with them; keep them for the run.
            .thread_keep_alive(Duration::from_secs(24 * 3600))
            .enable_all()
            .build()?;
        let cp = {
            // The client's connection tasks and every controller task are spawned on the
            // runtime entered here.
            let _guard = rt.enter();
            let client = Client::try_from(host.kube_config())?;
            ControlPlane::start(client, DEFAULT_NAMESPACE, Arc::new(Metrics::new()))
        };
        Ok(InProcessControlPlane {
            cp: Some(cp),
            rt: Some(rt),
        })
    }

    fn ready(&self) -> usize {
        // Pull clusters are Ready without a client, so not in `ready()`.
        self.cp.as_ref().map_or(0, |cp| {
            cp.clusters.snapshot().iter().filter(|c| c.ready).count()
        })
    }

    async fn stop(mut self) {
        if let Some(cp) = self.cp.take() {
            cp.shutdown().await;
        }
        if let Some(rt) = self.rt.take() {
            // Wait for its threads to end, so that a control plane started next is not
            // charged for their CPU time (threads are found by name).
            let ended = tokio::task::spawn_blocking(move || rt.shutdown_timeout(STOP_WAIT)).await;
            if let Err(e) = ended {
                warn!(error = %e, "stopping the in-process control plane's runtime failed");
            }
        }
    }
}

impl Drop for InProcessControlPlane {
    fn drop(&mut self) {
        self.cp.take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The last `lines` lines of a log file (empty when it cannot be read).
fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// KubeFedClusters whose Ready condition is True, as the control plane wrote them.
async fn ready_in_host(api: &Api<KubeFedCluster>) -> anyhow::Result<usize> {
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|c| c.status.as_ref().is_some_and(|s| s.is_ready()))
        .count())
}
