//! The crate's one error type.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while starting, driving or stopping a [`crate::LocalEnv`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `kube-apiserver`, `kube-controller-manager` or (for simulated pods)
    /// `kube-scheduler` is not where it should be.
    #[error(
        "{binary} not found in {}: run scripts/install-k8s.sh (it builds Kubernetes {}), or point \
         KUBE_BIN_DIR at a directory holding kube-apiserver, kube-controller-manager and kube-scheduler",
        dir.display(),
        crate::KUBE_VERSION
    )]
    KubeBinariesMissing {
        /// The directory that was searched.
        dir: PathBuf,
        /// The missing executable.
        binary: &'static str,
    },

    /// No `etcd` executable on `PATH` nor at `/usr/bin/etcd`.
    #[error(
        "etcd not found on PATH nor at /usr/bin/etcd: run scripts/install-k8s.sh (it installs Debian's etcd-server)"
    )]
    EtcdMissing,

    /// Neither `KUBE_BIN_DIR` nor `HOME` is set, so the binary cache cannot be located.
    #[error("cannot locate the Kubernetes binaries: neither KUBE_BIN_DIR nor HOME is set")]
    NoHome,

    /// A file-system or process-spawning operation failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Generating a cluster's CA, serving certificate or service-account key failed.
    #[error("generating certificates for cluster {cluster}")]
    Certificate {
        /// The cluster the material was for.
        cluster: String,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },

    /// Serializing a kubeconfig failed.
    #[error("serializing a kubeconfig")]
    Kubeconfig(#[source] serde_saphyr::SerializeError),

    /// A child process exited while it was expected to come up.
    #[error("{process} exited during start-up ({status}); last log lines:\n{log_tail}")]
    ProcessExited {
        /// Which process (for example `apiserver member1`).
        process: String,
        /// Its exit status.
        status: String,
        /// The end of its log file.
        log_tail: String,
    },

    /// A child process did not become ready in time.
    #[error(
        "{process} not ready within {timeout:?} (last probe: {last_error}); last log lines:\n{log_tail}"
    )]
    StartupTimeout {
        /// Which process (for example `apiserver member1`).
        process: String,
        /// The start-up timeout that elapsed.
        timeout: Duration,
        /// The outcome of the last readiness probe.
        last_error: String,
        /// The end of its log file.
        log_tail: String,
    },

    /// No cluster of that name exists in the environment.
    #[error("no cluster named {0:?} in this environment")]
    UnknownCluster(String),

    /// [`crate::LocalEnv::start_apiserver`] was called while the apiserver still runs.
    #[error("the apiserver of cluster {0} is already running")]
    AlreadyRunning(String),

    /// Building a Kubernetes client failed.
    #[error("building a client for cluster {cluster}")]
    Client {
        /// The cluster the client was for.
        cluster: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },

    /// No unused loopback port could be found.
    #[error("no free loopback port found")]
    NoFreePort,

    /// A [`crate::FaultProxy`] was asked to forward to an address off the loopback
    /// interface.
    #[error("the fault proxy only forwards to loopback addresses, not {0}")]
    ProxyTargetNotLoopback(std::net::SocketAddr),

    /// [`crate::LocalEnv::start_etcd_again`] was called while etcd still runs.
    #[error("etcd is already running")]
    EtcdAlreadyRunning,

    /// The process-spawner thread could not be started or has gone away.
    #[error("the process spawner thread is unavailable")]
    SpawnerGone,
}

/// Wraps an I/O error with what was being done.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
