//! The environment: one etcd, per cluster an apiserver and a controller-manager, and per
//! member optionally a scheduler and a simulated kubelet; their start-up, readiness,
//! restart and teardown.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::distr::Alphanumeric;
use tempfile::TempDir;

use crate::api_surface::ApiSurface;
use crate::cluster::Cluster;
use crate::error::{Error, io};
use crate::etcd::{self, EtcdSpec};
use crate::kubelet::PodSimulation;
use crate::process::{self, Process};
use crate::{kube_bin_dir, kubeconfig, pki, ports};

mod cluster_processes;
mod etcd_process;
mod pods;
mod seed;

pub use seed::HostSeed;

/// Prefix of every environment directory, also used to find ones left behind.
const DIR_PREFIX: &str = "flotilla-localenv-";
/// File in an environment directory naming the pid of the process that owns it.
const OWNER_FILE: &str = "owner.pid";
/// How long a SIGTERMed process gets before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Pause between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Attempts at starting a process whose port was taken in the meantime.
const PORT_ATTEMPTS: usize = 3;

/// How to build a [`LocalEnv`].
#[derive(Clone, Debug)]
pub struct EnvOptions {
    /// Number of member clusters, named `member1`, `member2`, … (default 2).
    pub members: usize,
    /// Start a kube-controller-manager per cluster (default `true`). Without it there are
    /// no service-account tokens, no namespace deletion, no garbage collection and no
    /// deployment → replicaset → pod.
    pub start_controller_manager: bool,
    /// How long each process may take to become ready (default 60 s).
    pub startup_timeout: Duration,
    /// Extra `--flag=value` arguments for every kube-apiserver, after the harness's own.
    pub extra_apiserver_args: Vec<String>,
    /// Pods that run, in appearance: a kube-scheduler and a simulated kubelet per member
    /// (Ready nodes; bound pods reported Running and Ready with pod IPs; **no container
    /// runs**). `None` (the default) leaves pods Pending, which costs nothing. Needs the
    /// controller-manager and `kube-scheduler` next to the other binaries.
    pub pods: Option<PodSimulation>,
    /// Which API versions the apiservers serve (default: [`ApiSurface::from_env`], i.e.
    /// [`ApiSurface::Current`] unless `FLOTILLA_API_SURFACE=legacy`).
    pub api_surface: ApiSurface,
    /// Members cut to what propagation needs, so that many fit on one machine (default
    /// `false`): a member's kube-controller-manager runs only the service-account and token
    /// controllers (what `flotilla join` needs; the host keeps every controller), API
    /// Priority and Fairness and the `kubernetes` Endpoints' reconciler are off, and a
    /// member apiserver's collector runs at [`LEAN_GOGC`]. Measured on v1.20.2, joined and
    /// watched: about 195 MiB per member apiserver instead of 257 MiB. Not for pods,
    /// deployments' replica sets or namespace deletion in members.
    pub lean_members: bool,
    /// How many apiservers start at once (default `None`: all). Many at once on a small
    /// machine can each miss [`EnvOptions::startup_timeout`]; batches start one after the
    /// other.
    pub start_batch: Option<usize>,
    /// Start a kube-controller-manager in the members (default `true`; the host's is
    /// [`EnvOptions::start_controller_manager`]). Without one, a member costs only its
    /// apiserver, but issues no service-account token (join it with its admin credentials,
    /// [`crate::Cluster::admin_token`]), creates no `default` ServiceAccount, never
    /// finalizes a deleted namespace and runs no Deployment controller.
    pub member_controller_manager: bool,
    /// Objects restored into the host's storage before its apiserver first starts, from a
    /// copy an earlier environment saved with [`LocalEnv::save_host_seed`] (default
    /// `None`). For callers that install the same CRDs into every host: see [`HostSeed`].
    pub host_seed: Option<HostSeed>,
    /// Run etcd at a higher CPU priority than the apiservers (`renice -n -10`; default
    /// `false`). With dozens of apiservers on a small machine the one shared etcd, which
    /// stands in for each cluster's own, otherwise starves and times requests out. Needs
    /// the privilege to raise a priority (root); without it etcd keeps its priority.
    pub favour_etcd: bool,
    /// `GOGC` for the apiservers that are not lean members (default `None`: Go's 100).
    /// A higher value trades memory for CPU: measured on a lone v1.20 apiserver, `400` took
    /// 10–20 % less CPU to start and to install Flotilla's CRDs. For test suites bound by
    /// the apiservers' CPU; lean members have [`EnvOptions::lean_gogc`].
    pub apiserver_gogc: Option<u32>,
    /// API Priority and Fairness in the apiservers (default `true`; lean members never
    /// have it). Off, an idle v1.20 apiserver took about a third less CPU.
    pub priority_and_fairness: bool,
    /// `GOMEMLIMIT` of a lean member's apiserver (default `None`: no limit). A limit below
    /// what the apiserver holds once it is watched makes its collector run without pause:
    /// see [`LEAN_GOGC`].
    pub lean_memory_limit: Option<String>,
    /// `GOGC` of a lean member's apiserver (default [`LEAN_GOGC`]; `None`: Go's 100).
    pub lean_gogc: Option<u32>,
    /// Run the workload controllers (deployment, replica set, stateful set, daemon set,
    /// job, cron job, …) in the host's kube-controller-manager (default `true`). `false`
    /// makes a host for plain workload manifests that policies propagate: it stores them
    /// as templates without running them, as Karmada's control-plane API server does
    /// ([`HOST_TEMPLATE_CONTROLLERS`]).
    pub host_workload_controllers: bool,
}

/// The host's kube-controller-manager controllers when it holds workload templates
/// ([`EnvOptions::host_workload_controllers`] `false`): everything but the controllers that
/// would run a workload (or scale or evict it) in the host itself.
pub const HOST_TEMPLATE_CONTROLLERS: &str = "*,-deployment,-replicaset,-statefulset,-daemonset,-job,-cronjob,-replicationcontroller,-horizontalpodautoscaling,-disruption";

/// `GOGC` of a lean member's apiserver (see [`EnvOptions::lean_members`]): the collector
/// runs when the heap has grown by a quarter over what it held after the last one, instead
/// of Go's doubling. Measured at 40 members (v1.20.2, every member joined and watched):
/// about 195 MiB per member apiserver and 0.3 cores for all 40 at idle. A memory limit
/// instead (`GOMEMLIMIT=150MiB`, used before) sat below what a watched member holds, so its
/// collector ran without pause: the 40 members took both cores at idle.
pub const LEAN_GOGC: u32 = 25;
/// The controllers of a lean member's kube-controller-manager.
const LEAN_CONTROLLERS: &str = "serviceaccount,serviceaccount-token";
/// The Go memory limit of a lean member's kube-controller-manager.
const LEAN_CONTROLLER_MEMORY_LIMIT: &str = "40MiB";

impl Default for EnvOptions {
    fn default() -> Self {
        Self {
            members: 2,
            start_controller_manager: true,
            startup_timeout: Duration::from_secs(60),
            extra_apiserver_args: Vec::new(),
            pods: None,
            api_surface: ApiSurface::from_env(),
            lean_members: false,
            start_batch: None,
            member_controller_manager: true,
            host_seed: None,
            favour_etcd: false,
            apiserver_gogc: None,
            priority_and_fairness: true,
            lean_memory_limit: None,
            lean_gogc: Some(LEAN_GOGC),
            host_workload_controllers: true,
        }
    }
}

impl EnvOptions {
    /// The defaults, with `members` member clusters.
    pub fn with_members(members: usize) -> Self {
        Self {
            members,
            ..Self::default()
        }
    }

    /// These options with the host's storage seeded from `seed` ([`EnvOptions::host_seed`]).
    pub fn seeded_with(self, seed: HostSeed) -> Self {
        Self {
            host_seed: Some(seed),
            ..self
        }
    }

    /// These options with pods simulated in every member ([`PodSimulation::default`]).
    pub fn with_pods(self) -> Self {
        Self {
            pods: Some(PodSimulation::default()),
            ..self
        }
    }
}

/// The processes of an environment; `None` where one is stopped or not started.
#[derive(Default)]
struct Processes {
    etcd: Option<Process>,
    apiservers: Vec<Option<Process>>,
    controller_managers: Vec<Option<Process>>,
    schedulers: Vec<Option<Process>>,
}

/// A running set of local clusters: `host` and `member1…N`.
///
/// Owns every process and its working directory; dropping it (also while a test panics)
/// stops all processes and deletes the directory. [`LocalEnv::shutdown`] does the same
/// without blocking the async runtime.
pub struct LocalEnv {
    options: EnvOptions,
    clusters: Vec<Cluster>,
    dir: PathBuf,
    kubeconfig: PathBuf,
    bin_dir: PathBuf,
    etcd_url: String,
    /// How etcd was started, to start it again the same way; set once it is up.
    etcd_spec: Option<EtcdSpec>,
    processes: Mutex<Processes>,
    /// The simulated kubelets' tasks, aborted when the environment stops.
    kubelets: Vec<tokio::task::JoinHandle<()>>,
    /// Removes `dir` when dropped; `None` once removed by [`LocalEnv::shutdown`].
    dir_guard: Option<TempDir>,
    /// The host's storage was seeded ([`EnvOptions::host_seed`]) before it started.
    seed_restored: bool,
}

impl LocalEnv {
    /// Starts etcd, then every cluster's apiserver concurrently, then (unless disabled) the
    /// controller-managers, and returns once all clusters serve `/readyz` and, with
    /// controller-managers, the `default` service account of each has its token.
    ///
    /// On failure every process started so far is stopped and the directory removed; the
    /// error carries the end of the failing process's log.
    pub async fn start(options: EnvOptions) -> Result<LocalEnv, Error> {
        let started = Instant::now();
        let bin_dir = kube_bin_dir()?;
        if options.pods.is_some() && !bin_dir.join(pods::SCHEDULER).is_file() {
            return Err(Error::KubeBinariesMissing {
                dir: bin_dir,
                binary: pods::SCHEDULER,
            });
        }
        let etcd = etcd::binary()?;
        let base = base_dir();
        remove_abandoned_dirs(&base);
        let dir_guard = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(&base)
            .map_err(io(format!("creating a directory in {}", base.display())))?;
        let dir = dir_guard.path().to_path_buf();
        write(&dir.join(OWNER_FILE), &std::process::id().to_string())?;

        let mut env = LocalEnv {
            kubeconfig: dir.join("kubeconfig"),
            options,
            clusters: Vec::new(),
            dir,
            bin_dir,
            etcd_url: String::new(),
            etcd_spec: None,
            processes: Mutex::new(Processes::default()),
            kubelets: Vec::new(),
            dir_guard: Some(dir_guard),
            seed_restored: false,
        };
        env.start_etcd(&etcd).await?;

        let names = std::iter::once("host".to_owned())
            .chain((1..=env.options.members).map(|i| format!("member{i}")));
        for name in names {
            let cluster = prepare_cluster(&env.dir, name)?;
            env.clusters.push(cluster);
        }
        env.restore_host_seed().await;
        {
            let mut processes = env.lock();
            processes.apiservers = env.clusters.iter().map(|_| None).collect();
            processes.controller_managers = env.clusters.iter().map(|_| None).collect();
            processes.schedulers = env.clusters.iter().map(|_| None).collect();
        }
        // Spawn the apiservers of a batch first so they start up in parallel, then wait
        // for each.
        let batch = env.options.start_batch.unwrap_or(env.clusters.len()).max(1);
        for first in (0..env.clusters.len()).step_by(batch) {
            let indexes = first..(first + batch).min(env.clusters.len());
            for index in indexes.clone() {
                env.spawn_apiserver(index)?;
            }
            for index in indexes {
                env.await_first_apiserver_start(index).await?;
                if env.runs_controller_manager(index) {
                    env.spawn_controller_manager(index)?;
                }
            }
        }
        write(&env.kubeconfig, &kubeconfig::render(&env.clusters)?)?;

        for index in 0..env.clusters.len() {
            if env.runs_controller_manager(index) {
                env.wait_controllers_working(index).await?;
            }
        }
        env.start_pod_simulation().await?;
        tracing::info!(
            clusters = env.clusters.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            dir = %env.dir.display(),
            "local environment ready"
        );
        Ok(env)
    }

    /// Whether cluster `index` is a lean member ([`EnvOptions::lean_members`]).
    fn is_lean(&self, index: usize) -> bool {
        self.options.lean_members && index > 0
    }

    /// Whether cluster `index` gets a kube-controller-manager.
    fn runs_controller_manager(&self, index: usize) -> bool {
        self.options.start_controller_manager
            && (index == 0 || self.options.member_controller_manager)
    }

    /// The host cluster, named `host`.
    pub fn host(&self) -> &Cluster {
        // `start` always creates the host cluster first, before any member.
        &self.clusters[0]
    }

    /// The member clusters, `member1`, `member2`, … in order.
    pub fn members(&self) -> &[Cluster] {
        &self.clusters[1..]
    }

    /// All clusters, the host first.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The cluster with this name, if any.
    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.name() == name)
    }

    /// A kubeconfig with one context per cluster, named after it; the current context is
    /// `host`. For example `kubectl --kubeconfig <path> --context member2 get ns`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The working directory (certificates, kubeconfigs, process logs, etcd data),
    /// removed when the environment stops.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process ids of the running etcd, apiservers, controller-managers and
    /// schedulers.
    pub fn pids(&self) -> Vec<u32> {
        let mut processes = self.lock();
        let Processes {
            etcd,
            apiservers,
            controller_managers,
            schedulers,
        } = &mut *processes;
        etcd.iter_mut()
            .chain(apiservers.iter_mut().flatten())
            .chain(controller_managers.iter_mut().flatten())
            .chain(schedulers.iter_mut().flatten())
            .filter_map(|p| p.exit_status().is_none().then(|| p.pid()))
            .collect()
    }

    /// Stops the apiserver of cluster `name` (SIGTERM, then SIGKILL after a grace period),
    /// so requests to it fail until [`LocalEnv::start_apiserver`]. Its data stays in etcd
    /// and its controller-manager keeps running. Stopping a stopped apiserver does nothing.
    pub async fn stop_apiserver(&self, name: &str) -> Result<(), Error> {
        let index = self.index(name)?;
        let Some(mut apiserver) = self.lock().apiservers[index].take() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || {
            process::terminate(std::slice::from_mut(&mut apiserver), STOP_GRACE)
        })
        .await
        .map_err(|e| Error::Io {
            context: format!("stopping the apiserver of {name}"),
            source: std::io::Error::other(e),
        })?;
        tracing::info!(cluster = %name, "apiserver stopped");
        Ok(())
    }

    /// Starts the apiserver of cluster `name` again, on the same port with the same
    /// certificates and data, and waits until it serves `/readyz`.
    pub async fn start_apiserver(&self, name: &str) -> Result<(), Error> {
        let index = self.index(name)?;
        {
            let mut processes = self.lock();
            if let Some(running) = processes.apiservers[index].as_mut()
                && running.exit_status().is_none()
            {
                return Err(Error::AlreadyRunning(name.to_owned()));
            }
        }
        self.spawn_apiserver(index)?;
        self.wait_apiserver_ready(index).await?;
        tracing::info!(cluster = %name, "apiserver restarted");
        Ok(())
    }

    /// Stops etcd (SIGTERM, then SIGKILL after a grace period): every apiserver loses its
    /// storage and fails requests (watches end, writes and uncached reads fail) until
    /// [`LocalEnv::start_etcd_again`]. The apiservers keep running. Stopping a stopped
    /// etcd does nothing.
    pub async fn stop_etcd(&self) -> Result<(), Error> {
        let Some(mut etcd) = self.lock().etcd.take() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || {
            process::terminate(std::slice::from_mut(&mut etcd), STOP_GRACE)
        })
        .await
        .map_err(|e| Error::Io {
            context: "stopping etcd".into(),
            source: std::io::Error::other(e),
        })?;
        tracing::info!("etcd stopped");
        Ok(())
    }

    /// Starts etcd again after [`LocalEnv::stop_etcd`], on the same ports with the same
    /// data directory (so every object is still there), and waits until it is healthy.
    /// The apiservers reconnect by themselves; this does not wait for them.
    pub async fn start_etcd_again(&self) -> Result<(), Error> {
        {
            let mut processes = self.lock();
            if let Some(running) = processes.etcd.as_mut()
                && running.exit_status().is_none()
            {
                return Err(Error::EtcdAlreadyRunning);
            }
        }
        // `start` always sets the spec before it returns a `LocalEnv`.
        let Some(spec) = self.etcd_spec.as_ref() else {
            return Err(Error::EtcdAlreadyRunning);
        };
        self.spawn_etcd(spec)?;
        self.wait_etcd_healthy(spec.client_port).await?;
        tracing::info!("etcd restarted");
        Ok(())
    }

    /// Stops every process and removes the directory, like dropping the environment, but
    /// without blocking the async runtime; reports a directory that could not be removed.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        tokio::task::spawn_blocking(move || {
            self.stop_all();
            match self.dir_guard.take() {
                Some(guard) => guard
                    .close()
                    .map_err(io(format!("removing {}", self.dir.display()))),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| Error::Io {
            context: "shutting down the local environment".into(),
            source: std::io::Error::other(e),
        })?
    }

    fn lock(&self) -> MutexGuard<'_, Processes> {
        // A panic while holding the lock leaves the table consistent (every update is a
        // single assignment), so a poisoned lock is still usable.
        self.processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn index(&self, name: &str) -> Result<usize, Error> {
        self.clusters
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| Error::UnknownCluster(name.to_owned()))
    }

    /// Stops the simulated kubelets, schedulers, controller-managers and apiservers, then
    /// etcd, and waits for all of them.
    fn stop_all(&mut self) {
        for kubelet in self.kubelets.drain(..) {
            kubelet.abort();
        }
        let processes = self
            .processes
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let mut kube: Vec<Process> = processes
            .schedulers
            .iter_mut()
            .chain(processes.controller_managers.iter_mut())
            .chain(processes.apiservers.iter_mut())
            .filter_map(Option::take)
            .collect();
        process::terminate(&mut kube, STOP_GRACE);
        if let Some(etcd) = processes.etcd.take() {
            process::terminate(&mut [etcd], STOP_GRACE);
        }
    }
}

impl Drop for LocalEnv {
    fn drop(&mut self) {
        self.stop_all();
        // `dir_guard` removes the directory after this, once no process writes into it.
    }
}

impl std::fmt::Debug for LocalEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEnv")
            .field("clusters", &self.clusters)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Creates a cluster's directory, key material and token file, and picks its port.
fn prepare_cluster(env_dir: &Path, name: String) -> Result<Cluster, Error> {
    let dir = env_dir.join(&name);
    std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let pki = pki::generate(&name).map_err(|source| Error::Certificate {
        cluster: name.clone(),
        source,
    })?;
    let token: String = rand::rng()
        .sample_iter(Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    write(&dir.join("ca.crt"), &pki.ca_cert_pem)?;
    write(&dir.join("ca.key"), &pki.ca_key_pem)?;
    write(&dir.join("apiserver.crt"), &pki.serving_cert_pem)?;
    write(&dir.join("apiserver.key"), &pki.serving_key_pem)?;
    write(&dir.join("sa.key"), &pki.service_account_key_pem)?;
    write(&dir.join("sa.pub"), &pki.service_account_public_pem)?;
    // Static token file: token,user,uid,"group,…".
    write(
        &dir.join("tokens.csv"),
        &format!("{token},admin,admin,\"system:masters\"\n"),
    )?;
    Ok(Cluster::new(
        name,
        ports::free_port()?,
        pki.ca_cert_pem,
        pki.ca_cert_der,
        token,
        dir,
    ))
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(io(format!("writing {}", path.display())))
}

/// Whether a start-up failure came from a port that another process took meanwhile.
fn port_conflict(error: &Error) -> bool {
    matches!(error, Error::ProcessExited { log_tail, .. } if log_tail.contains("address already in use"))
}

/// Where environment directories go: `FLOTILLA_LOCALENV_DIR`, else `/dev/shm` (etcd's
/// fsyncs are then nearly free), else the system temporary directory.
fn base_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLOTILLA_LOCALENV_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Removes environment directories whose owning process is gone (killed before it could
/// clean up). Their children died with it through the parent-death signal.
fn remove_abandoned_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = entry.path();
        // No owner file yet means another process is still creating it: leave it alone.
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        let Ok(pid) = owner.trim().parse::<u32>() else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(dir = %path.display(), pid, "removing directory of a dead environment");
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
