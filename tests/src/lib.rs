//! Shared helpers for integration tests on real local clusters: starting an environment
//! with logging set up, and polling until a condition holds. Builders of test objects are in
//! [`objects`], waits on a federated object in [`host`], waits on member objects in
//! [`wait`], member reads in [`member`], shared assertions in [`assert`], objects as a
//! previous version wrote them in [`fixture`], a push + pull federation whose binaries the
//! test starts in [`mixed`] and the usual
//! starting point in [`setup`]; API servers' request counts in [`requests`]; Flotilla's image
//! run as a Pod would run it in [`pod`]; scenarios sharing one federation in [`scenarios`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

use anyhow::Context as _;

pub use flotilla_localenv::{ApiSurface, Cluster, EnvOptions, LocalEnv};

pub mod assert;
pub mod browser;
pub mod cli;
pub mod drift;
pub mod federation;
pub mod fixture;
pub mod host;
pub mod kubectl;
pub mod mcs;
pub mod member;
pub mod mixed;
pub mod objects;
pub mod pod;
pub mod requests;
pub mod scenarios;
pub mod setup;
pub mod wait;

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

/// The apiservers' `GOGC` in the tests ([`EnvOptions::apiserver_gogc`]).
const APISERVER_GOGC: u32 = 400;

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
pub async fn env_with(mut options: EnvOptions) -> LocalEnv {
    init_tracing();
    // The suite is bound by the apiservers' CPU on two cores (docs/development.md): their
    // garbage collector runs a quarter as often, for some memory.
    options.apiserver_gogc.get_or_insert(APISERVER_GOGC);
    // API Priority and Fairness: nothing here tests it, and it took about a third of an
    // idle apiserver's CPU (6 members, 30 s idle: 1.3 against 2.0 CPU s).
    options.priority_and_fairness = false;
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

/// The `flotilla` binary: `$FLOTILLA_BIN`, or built once per test process with cargo (debug
/// profile), for tests that run it as a real process.
pub fn flotilla_binary() -> anyhow::Result<PathBuf> {
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.as_ref() {
        return Ok(path.clone());
    }
    if let Some(path) = std::env::var_os("FLOTILLA_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        *built = Some(path.clone());
        return Ok(path);
    }
    let cargo = std::env::var("CARGO")
        .ok()
        .or(option_env!("CARGO").map(str::to_owned))
        .unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    // Variables cargo sets for this test process would look like a changed environment to
    // build scripts (ring tracks CARGO_PKG_NAME, CARGO_MANIFEST_DIR, ...) and rebuild them.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_by_cargo = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|p| key.starts_with(p))
            || [
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&key.as_ref());
        if set_by_cargo {
            command.env_remove(key.as_ref());
        }
    }
    let output = command
        .args([
            "build",
            "-p",
            "flotilla-cli",
            "--bin",
            "flotilla",
            "--message-format=json",
        ])
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build")?;
    anyhow::ensure!(output.status.success(), "cargo build of flotilla failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "flotilla")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo did not report the flotilla executable")?;
    *built = Some(path.clone());
    Ok(path)
}
