//! The host event that queued a key, as the root span of the reconcile it causes. With
//! traces exported, a change of a federated object seen by the host watch opens a
//! `host_event` span, kept beside the work queue until a worker takes the key; that worker's
//! `reconcile` span is its child, so a propagation's trace starts at the host's watch event
//! and the key's wait in the queue is the gap before the reconcile. Without an exporter
//! nothing is opened or kept: one relaxed atomic load per host event. It carries spans
//! only; what a key means and when it runs are the controller's and the queue's.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tracing::Span;

use super::Key;

/// Set once by the binary that installs an OpenTelemetry exporter.
static EXPORTED: AtomicBool = AtomicBool::new(false);

/// Says that spans are exported (call it when installing the exporter): host events then
/// become root spans. Types started before the call keep not tracing them.
pub fn export_host_events() {
    EXPORTED.store(true, Ordering::Relaxed);
}

/// The open `host_event` span of each queued key of one federated type.
pub(super) struct Origins {
    kind: String,
    /// `None` when spans are not exported.
    pending: Option<Mutex<HashMap<Key, Span>>>,
}

impl Origins {
    /// For the federated kind `kind`; keeps spans only if [`export_host_events`] was called.
    pub(super) fn new(kind: &str) -> Self {
        Origins {
            kind: kind.to_owned(),
            pending: EXPORTED
                .load(Ordering::Relaxed)
                .then(|| Mutex::new(HashMap::new())),
        }
    }

    fn lock(pending: &Mutex<HashMap<Key, Span>>) -> std::sync::MutexGuard<'_, HashMap<Key, Span>> {
        // A map of keys and spans, valid after any panic in a holder.
        pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host watch saw `key` change: opens its span unless one already waits for a
    /// worker (the first event that queued the key is the root of its next reconcile).
    pub(super) fn event(&self, key: &Key) {
        let Some(pending) = &self.pending else {
            return;
        };
        Self::lock(pending).entry(key.clone()).or_insert_with(|| {
            tracing::info_span!(
                parent: None,
                "host_event",
                kind = %self.kind,
                namespace = key.0.as_deref().unwrap_or_default(),
                name = %key.1,
            )
        });
    }

    /// The span of the event that queued `key`, for the worker about to reconcile it
    /// (closed when the worker drops it); [`Span::none`] when there is none.
    pub(super) fn take(&self, key: &Key) -> Span {
        self.pending
            .as_ref()
            .and_then(|p| Self::lock(p).remove(key))
            .unwrap_or_else(Span::none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_nothing_is_kept() {
        let origins = Origins {
            kind: "FederatedConfigMap".into(),
            pending: None,
        };
        let key: Key = (Some("ns".into()), "a".into());
        origins.event(&key);
        assert!(origins.take(&key).is_none());
    }

    #[test]
    fn the_first_event_of_a_queued_key_is_kept_until_a_worker_takes_it() {
        let origins = Origins {
            kind: "FederatedConfigMap".into(),
            pending: Some(Mutex::new(HashMap::new())),
        };
        let key: Key = (Some("ns".into()), "a".into());
        origins.event(&key);
        origins.event(&key);
        let pending = origins.pending.as_ref().map(|p| Origins::lock(p).len());
        assert_eq!(pending, Some(1), "one span per queued key");
        let _taken = origins.take(&key);
        let pending = origins.pending.as_ref().map(|p| Origins::lock(p).len());
        assert_eq!(pending, Some(0));
    }
}
