//! What the agent tells about itself: its metrics ([`super::metrics`]), its probes (`/healthz`
//! always, `/readyz` once the host was reached — the last Lease renewal succeeded — and the
//! inventory is synced — the Work and AppliedWork caches are complete) and Events on a
//! Work in the host when one of its manifests newly fails, named after the member's reason.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use flotilla_api::work::{Work, WorkStatus};
use flotilla_multicluster::{
    events::{publish_related, recorder},
    gate::Gate,
    http::{self, Health, MetricsAccess},
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource,
    runtime::events::{EventType, Recorder},
};
use tokio_util::sync::CancellationToken;

use super::{
    metrics::AgentMetrics,
    plan::ManifestResult,
    rejection::{describe, new_failures},
};

/// How often readiness is worked out again.
const READINESS_PERIOD: Duration = Duration::from_millis(500);

/// The agent's metrics, probes and Events.
pub struct Observer {
    /// The metric families.
    pub metrics: Arc<AgentMetrics>,
    /// What the probes answer.
    pub health: Arc<Health>,
    /// Why the host is not reachable (`None`: the last Lease renewal succeeded).
    host_problem: Mutex<Option<String>>,
    recorder: Recorder,
}

/// Whether the agent is ready: the host reached and the inventory synced; else why not.
pub fn readiness(inventory_synced: bool, host_problem: Option<&str>) -> Result<(), String> {
    match (host_problem, inventory_synced) {
        (Some(problem), _) => Err(format!("the host is not reachable: {problem}")),
        (None, false) => Err("the inventory (Works, AppliedWorks) is not synced yet".into()),
        (None, true) => Ok(()),
    }
}

impl Observer {
    /// An observer whose Events are written to the host with `host`.
    pub fn new(host: Client) -> Arc<Self> {
        Arc::new(Observer {
            metrics: Arc::new(AgentMetrics::new()),
            health: Arc::new(Health::solo()),
            host_problem: Mutex::new(Some("not reached yet".into())),
            recorder: recorder(host, "flotilla-agent"),
        })
    }

    /// Records the outcome of a Lease renewal.
    pub fn lease_renewal(&self, outcome: Result<(), &kube::Error>) {
        let problem = match outcome {
            Ok(()) => {
                self.metrics.lease_renewed();
                None
            }
            Err(e) => Some(e.to_string()),
        };
        *self.host_problem.lock().unwrap_or_else(|e| e.into_inner()) = problem;
    }

    fn refresh(&self, inventory_synced: bool) {
        let problem = self
            .host_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let ready = readiness(inventory_synced, problem.as_deref());
        self.health.set_ready(ready.is_ok());
        self.health.set_problem(ready.err());
    }

    /// Counts this round's failures and sends an Event for each failure that is new since
    /// `previous` (the Work's status before the round).
    pub async fn report_failures(
        &self,
        work: &Work,
        previous: Option<&WorkStatus>,
        results: &[ManifestResult],
    ) {
        let fresh = new_failures(previous, results);
        for r in results {
            if let Some(reason) = super::rejection::failure_reason(r) {
                self.metrics.failed(&reason);
            }
        }
        let reference = work.object_ref(&());
        for (r, reason) in fresh {
            let message = match &r.result {
                Err((_, m)) => m.as_str(),
                Ok(()) => "",
            };
            let related = ObjectReference {
                kind: Some(r.identifier.kind.clone()),
                namespace: Some(r.identifier.namespace.clone()).filter(|n| !n.is_empty()),
                name: Some(r.identifier.name.clone()),
                ..ObjectReference::default()
            };
            let note = format!("the member refused {}: {message}", describe(&r.identifier));
            publish_related(
                &self.recorder,
                &reference,
                related,
                EventType::Warning,
                &reason,
                "Apply",
                note,
            )
            .await;
        }
    }
}

/// Works out readiness every [`READINESS_PERIOD`] (the inventory counts as synced once the
/// agent's gate opened).
pub async fn keep_ready(observer: Arc<Observer>, gate: Gate) {
    let mut tick = tokio::time::interval(READINESS_PERIOD);
    loop {
        tick.tick().await;
        observer.refresh(gate.is_open());
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `cancel` fires; returns the
/// bound address.
pub async fn serve(
    observer: &Observer,
    addr: SocketAddr,
    access: MetricsAccess,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    http::serve(
        addr,
        observer.metrics.clone(),
        observer.health.clone(),
        access,
        cancel,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_the_host_and_a_synced_inventory() {
        assert_eq!(readiness(true, None), Ok(()));
        let unsynced = readiness(false, None).expect_err("not synced");
        assert!(unsynced.contains("not synced"), "{unsynced}");
        let offline = readiness(true, Some("connection refused")).expect_err("no host");
        assert!(offline.contains("connection refused"), "{offline}");
    }
}
