//! The health check of an engaged cluster: a `/version` read every [`PROBE_PERIOD`];
//! Ready after one success, unready after [`FAILURE_THRESHOLD`] failures in a row. A
//! failure is reported on the set ([`ClusterSet::report`]) with a reason that never
//! repeats a credential plugin's output; a success clears it. Ends with the engagement.

use std::time::Duration;

use kube::{Client, client::AuthError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::ClusterSet;

/// How often an engaged cluster is probed.
pub const PROBE_PERIOD: Duration = Duration::from_secs(5);
/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Failed probes in a row before a cluster is unready.
pub const FAILURE_THRESHOLD: u32 = 3;

/// The health verdict after a probe: `Some(ready)` when it changes what the set says.
pub fn next_ready(ready: bool, failures_in_a_row: u32, probe_ok: bool) -> Option<bool> {
    match (ready, probe_ok) {
        (false, true) => Some(true),
        (true, false) if failures_in_a_row >= FAILURE_THRESHOLD => Some(false),
        _ => None,
    }
}

/// Why a request to a cluster failed, safe to show: a failed exec credential plugin is
/// named by its exit status only (its output may hold a credential).
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Auth(AuthError::AuthExecRun { out, .. }) => {
            format!("the exec credential plugin failed ({})", out.status)
        }
        kube::Error::Auth(AuthError::AuthExecStart(e)) => {
            format!("the exec credential plugin could not be started: {e}")
        }
        kube::Error::Auth(AuthError::AuthExecParse(_)) => {
            "the exec credential plugin's output is not an ExecCredential".into()
        }
        kube::Error::Auth(_) => "authentication failed".into(),
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => crate::error_chain(other),
    }
}

/// Probes cluster `name` until `engagement` is cancelled.
pub async fn probe(set: ClusterSet, name: String, client: Client, engagement: CancellationToken) {
    let mut failures = 0;
    let mut ready = false;
    let mut ticks = tokio::time::interval(PROBE_PERIOD);
    loop {
        tokio::select! {
            _ = engagement.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let verdict = tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await;
        let problem = match verdict {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(describe(&e)),
            Err(_) => Some(format!("no answer to /version within {PROBE_TIMEOUT:?}")),
        };
        let ok = problem.is_none();
        failures = if ok { 0 } else { failures + 1 };
        debug!(cluster = %name, ok, failures, "probed");
        if engagement.is_cancelled() {
            return;
        }
        if ok || !ready || failures >= FAILURE_THRESHOLD {
            set.report(&name, problem);
        }
        if let Some(now) = next_ready(ready, failures, ok) {
            info!(cluster = %name, ready = now, "cluster health changed");
            ready = now;
            set.set_ready(&name, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_turns_ready_on_one_success_and_unready_after_three_failures() {
        assert_eq!(next_ready(false, 0, true), Some(true));
        assert_eq!(next_ready(true, 1, false), None);
        assert_eq!(next_ready(true, 3, false), Some(false));
        assert_eq!(next_ready(false, 5, false), None);
        assert_eq!(next_ready(true, 0, true), None);
    }

    #[test]
    fn a_failed_plugin_is_described_without_its_output() {
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Output {
            status: std::process::ExitStatus::from_raw(256),
            stdout: b"{\"status\":{\"token\":\"s3cr3t-token\"}}".to_vec(),
            stderr: b"s3cr3t-token".to_vec(),
        };
        let error = kube::Error::Auth(AuthError::AuthExecRun {
            cmd: "plugin".into(),
            out: Box::new(out),
        });
        let reason = describe(&error);
        assert!(reason.contains("exec credential plugin failed"), "{reason}");
        assert!(!reason.contains("s3cr3t"), "{reason}");
    }
}
