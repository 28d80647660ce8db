//! Shared helpers for integration tests on real local clusters: starting an environment
//! with logging set up, and polling until a condition holds.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::future::Future;
use std::sync::Once;
use std::time::{Duration, Instant};

pub use flotilla_localenv::{Cluster, EnvOptions, LocalEnv};

pub mod federation;

/// How often [`wait_for`] polls.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Installs a `tracing` subscriber once per test binary, filtered by `RUST_LOG` (default
/// `warn`), writing through the test harness's captured output.
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// Starts a host and `members` member clusters with default options, logging set up.
///
/// # Panics
/// When the environment cannot start; the message carries the failing process's log tail.
pub async fn env(members: usize) -> LocalEnv {
    env_with(EnvOptions::with_members(members)).await
}

/// Like [`env`], with explicit options.
///
/// # Panics
/// When the environment cannot start; the message carries the failing process's log tail.
pub async fn env_with(options: EnvOptions) -> LocalEnv {
    init_tracing();
    match LocalEnv::start(options).await {
        Ok(env) => env,
        Err(e) => panic!(
            "local environment failed to start: {:#}",
            anyhow::Error::new(e)
        ),
    }
}

/// Calls `check` every 100 ms until it returns `Ok`, and returns that value; after
/// `timeout`, fails with the last error, saying what was awaited.
///
/// ```no_run
/// # async fn demo(api: kube::Api<k8s_openapi::api::core::v1::Namespace>) -> anyhow::Result<()> {
/// use std::time::Duration;
/// flotilla_tests::wait_for(Duration::from_secs(30), "namespace demo gone", || async {
///     anyhow::ensure!(api.get_opt("demo").await?.is_none(), "still there");
///     Ok(())
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("timed out after {timeout:?} waiting for {what}")));
            }
            Err(_) => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}
