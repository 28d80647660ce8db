//! Real local Kubernetes clusters for tests, the demo and the benchmark.
//!
//! [`LocalEnv::start`] runs one etcd and, per cluster (`host`, `member1`, …), a
//! kube-apiserver with its own etcd prefix, CA and serving certificate, static admin token
//! and RBAC, plus a kube-controller-manager, all on loopback. Clients verify TLS against the
//! generated CA. With [`EnvOptions::pods`], each member also gets a kube-scheduler and a
//! simulated kubelet: pods are bound to simulated nodes and reported Running and Ready,
//! but **no container runs**. Dropping the environment stops every process and deletes its directory;
//! children also die with the test process if it is killed.
//!
//! [`testkit`] is the test kit for multi-cluster controllers: N clusters behind fault
//! proxies, faults and waits.
//!
//! ```no_run
//! # async fn demo() -> Result<(), flotilla_localenv::Error> {
//! use flotilla_localenv::{EnvOptions, LocalEnv};
//!
//! let env = LocalEnv::start(EnvOptions::with_members(2)).await?;
//! let host = env.host().client().await?;
//! let member1 = env.members()[0].client().await?;
//! // kubectl --kubeconfig <env.kubeconfig_path()> --context member1 get ns
//! env.shutdown().await?;
//! # let _ = (host, member1);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api_surface;
mod cluster;
mod env;
mod error;
mod etcd;
mod kubeconfig;
mod kubelet;
mod pki;
mod ports;
mod process;
mod proxy;
pub mod testkit;

use std::path::PathBuf;

pub use api_surface::ApiSurface;
pub use cluster::Cluster;
pub use env::{EnvOptions, HostSeed, LEAN_GOGC, LocalEnv};
pub use error::Error;
pub use kubelet::{NodeCapacity, PodSimulation};
pub use process::Process;
pub use proxy::{FaultMode, FaultProxy, ProxyStats};

/// The Kubernetes version `scripts/install-k8s.sh` builds and caches.
pub const KUBE_VERSION: &str = "v1.20.2";

/// The directory holding `kube-apiserver` and `kube-controller-manager`: `KUBE_BIN_DIR`
/// when set, else the cache of `scripts/install-k8s.sh`,
/// `$FLOTILLA_CACHE/k8s-v1.20.2` (default `~/.cache/flotilla/k8s-v1.20.2`).
///
/// Fails, naming the install script, when either binary is missing.
pub fn kube_bin_dir() -> Result<PathBuf, Error> {
    let dir = match non_empty("KUBE_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => cache_root()?.join(format!("k8s-{KUBE_VERSION}")),
    };
    for binary in ["kube-apiserver", "kube-controller-manager"] {
        if !dir.join(binary).is_file() {
            return Err(Error::KubeBinariesMissing { dir, binary });
        }
    }
    Ok(dir)
}

fn non_empty(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The cache outside the repository: `$FLOTILLA_CACHE`, default `~/.cache/flotilla`.
pub(crate) fn cache_root() -> Result<PathBuf, Error> {
    Ok(match non_empty("FLOTILLA_CACHE") {
        Some(cache) => PathBuf::from(cache),
        None => PathBuf::from(non_empty("HOME").ok_or(Error::NoHome)?)
            .join(".cache")
            .join("flotilla"),
    })
}
