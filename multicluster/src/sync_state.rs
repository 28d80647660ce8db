//! Where a member cache stands against its sync timeout: a pure decision, so that one
//! unreachable cluster is reported with a reason instead of stalling everything waiting
//! for the caches (controller-runtime#1681).

use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

/// The state of one cluster's cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Its first list is complete.
    Synced,
    /// Still listing, within its timeout (or without one).
    Syncing,
    /// Not synced within the timeout: reported, and no longer waited for. It keeps trying
    /// and turns `Synced` once it is.
    TimedOut {
        /// Why: the watch's last failure, or no answer at all.
        reason: String,
    },
}

/// The state of a cache: `synced` or not, started `elapsed` ago, with `timeout`, its
/// watch's last failure being `failure`.
pub fn sync_state(
    synced: bool,
    elapsed: Duration,
    timeout: Option<Duration>,
    failure: Option<String>,
) -> SyncState {
    match timeout {
        _ if synced => SyncState::Synced,
        Some(timeout) if elapsed >= timeout => SyncState::TimedOut {
            reason: timed_out_reason(timeout, failure),
        },
        _ => SyncState::Syncing,
    }
}

/// The reason of a missed sync timeout.
pub fn timed_out_reason(timeout: Duration, failure: Option<String>) -> String {
    match failure {
        Some(failure) => format!("cache not synced within {timeout:?}: {failure}"),
        None => format!("cache not synced within {timeout:?}: no answer from the API server"),
    }
}

/// Locks a mutex, a poisoned one included (it holds a plain value).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_cache_times_out_only_when_unsynced_past_its_timeout() {
        assert_eq!(sync_state(true, 10 * S, Some(S), None), SyncState::Synced);
        assert_eq!(sync_state(false, S / 2, Some(S), None), SyncState::Syncing);
        assert_eq!(sync_state(false, 10 * S, None, None), SyncState::Syncing);
        let state = sync_state(false, 2 * S, Some(S), Some("connection refused".into()));
        let SyncState::TimedOut { reason } = state else {
            panic!("{state:?}")
        };
        assert!(reason.contains("connection refused"), "{reason}");
        let state = sync_state(false, 2 * S, Some(S), None);
        assert!(matches!(state, SyncState::TimedOut { reason } if reason.contains("no answer")));
    }
}
