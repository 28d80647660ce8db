//! A test kit for multi-cluster controllers: real clusters from a `#[tokio::test]`, each
//! behind a fault proxy, so a test can partition, slow down or stop any of them while the
//! controller under test runs.
//!
//! [`TestClusters::start`] runs N clusters (`host`, `member1`, …) and writes a kubeconfig
//! whose contexts reach every cluster **through its proxy** ([`TestClusters::kubeconfig_path`]):
//! hand it to the controller under test (e.g. flotilla-multicluster's
//! `KubeconfigProvider`). The test itself checks the clusters with direct clients
//! ([`TestClusters::client`]), which no fault touches. Faults: [`TestClusters::black_hole`]
//! (silence, like a partition), [`TestClusters::slow`] (latency), [`TestClusters::heal`],
//! [`TestClusters::stop_apiserver`] / [`TestClusters::start_apiserver`]. Waits:
//! [`wait_until`]. Dropping the kit stops everything.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use flotilla_localenv::testkit::{TestClusters, wait_until};
//!
//! let clusters = TestClusters::start(3).await?;          // host, member1, member2
//! // run the controller under test on clusters.kubeconfig_path() ...
//! clusters.black_hole("member2");                          // member2 goes silent
//! let member1 = clusters.client("member1").await?;
//! wait_until(Duration::from_secs(30), "member1 answers", || async {
//!     member1.apiserver_version().await.map_err(|e| e.to_string())
//! })
//! .await?;
//! clusters.heal("member2");
//! # Ok(())
//! # }
//! ```

use std::{collections::BTreeMap, fmt, future::Future, path::PathBuf, time::Duration};

use crate::{Cluster, EnvOptions, Error, FaultMode, FaultProxy, LocalEnv, kubeconfig};

/// N real clusters, each behind a fault proxy; see the module docs.
pub struct TestClusters {
    env: LocalEnv,
    proxies: BTreeMap<String, FaultProxy>,
    kubeconfig: PathBuf,
}

impl TestClusters {
    /// Starts `n` clusters (at least one): `host`, then `member1` … `member{n-1}`.
    pub async fn start(n: usize) -> Result<TestClusters, Error> {
        Self::start_with(EnvOptions::with_members(n.saturating_sub(1))).await
    }

    /// Starts the clusters `options` describe.
    pub async fn start_with(options: EnvOptions) -> Result<TestClusters, Error> {
        let env = LocalEnv::start(options).await?;
        let mut proxies = BTreeMap::new();
        let mut proxied: Vec<Cluster> = Vec::new();
        for cluster in env.clusters() {
            let proxy = FaultProxy::for_cluster(cluster).await?;
            let mut through = cluster.clone();
            through.set_port(proxy.addr().port());
            proxied.push(through);
            proxies.insert(cluster.name().to_owned(), proxy);
        }
        let kubeconfig = env.dir().join("testkit.kubeconfig");
        let text = kubeconfig::render(&proxied)?;
        std::fs::write(&kubeconfig, text).map_err(|source| Error::Io {
            context: format!("writing {}", kubeconfig.display()),
            source,
        })?;
        Ok(TestClusters {
            env,
            proxies,
            kubeconfig,
        })
    }

    /// The environment (direct kubeconfig, processes, etcd).
    pub fn env(&self) -> &LocalEnv {
        &self.env
    }

    /// The clusters' names: `host`, `member1`, ….
    pub fn names(&self) -> Vec<String> {
        self.env
            .clusters()
            .iter()
            .map(|c| c.name().to_owned())
            .collect()
    }

    /// A kubeconfig with a context per cluster (named after it) reaching it through its
    /// fault proxy: for the controller under test.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// A client configuration for cluster `name` through its fault proxy.
    pub fn proxied_config(&self, name: &str) -> Result<kube::Config, Error> {
        let (cluster, proxy) = self.cluster_and_proxy(name)?;
        let mut config = cluster.kube_config();
        // A proxy URL is built from a port number and is always valid.
        #[allow(clippy::unwrap_used)] // invariant stated above
        let url: http::Uri = proxy.url().parse().unwrap();
        config.cluster_url = url;
        Ok(config)
    }

    /// A direct admin client of cluster `name` (no fault touches it): for the test's checks.
    pub async fn client(&self, name: &str) -> Result<kube::Client, Error> {
        self.cluster_and_proxy(name)?.0.client().await
    }

    /// The cluster `name`.
    pub fn cluster(&self, name: &str) -> Result<&Cluster, Error> {
        Ok(self.cluster_and_proxy(name)?.0)
    }

    fn cluster_and_proxy(&self, name: &str) -> Result<(&Cluster, &FaultProxy), Error> {
        let cluster = self.env.cluster(name);
        let proxy = self.proxies.get(name);
        cluster
            .zip(proxy)
            .ok_or_else(|| Error::UnknownCluster(name.to_owned()))
    }

    fn set_mode(&self, name: &str, mode: FaultMode) {
        if let Some(proxy) = self.proxies.get(name) {
            proxy.set_mode(mode);
        }
    }

    /// Cluster `name` goes silent behind its proxy (connections accepted, nothing
    /// answered), as in a network partition.
    pub fn black_hole(&self, name: &str) {
        self.set_mode(name, FaultMode::BlackHole);
    }

    /// Every chunk of traffic to and from cluster `name` waits `delay` in its proxy.
    pub fn slow(&self, name: &str, delay: Duration) {
        self.set_mode(name, FaultMode::Latency(delay));
    }

    /// Cluster `name`'s proxy forwards everything again (held traffic is delivered).
    pub fn heal(&self, name: &str) {
        self.set_mode(name, FaultMode::PassThrough);
    }

    /// Stops cluster `name`'s API server (see [`LocalEnv::stop_apiserver`]).
    pub async fn stop_apiserver(&self, name: &str) -> Result<(), Error> {
        self.env.stop_apiserver(name).await
    }

    /// Starts cluster `name`'s API server again and waits until it is ready.
    pub async fn start_apiserver(&self, name: &str) -> Result<(), Error> {
        self.env.start_apiserver(name).await
    }

    /// Stops every process and removes the directory.
    pub async fn shutdown(self) -> Result<(), Error> {
        drop(self.proxies);
        self.env.shutdown().await
    }
}

/// A wait that ran out of time: what was awaited and the last complaint.
#[derive(Debug)]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// The last complaint of the check.
    pub last: String,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "timed out waiting until {}: {}", self.what, self.last)
    }
}

impl std::error::Error for TimedOut {}

/// Calls `check` every 100 ms until it returns `Ok`, and returns that value; after
/// `timeout`, fails saying what was awaited, with the last error.
pub async fn wait_until<T, E, F, Fut>(
    timeout: Duration,
    what: &str,
    mut check: F,
) -> Result<T, TimedOut>
where
    E: fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(TimedOut {
                what: what.to_owned(),
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
