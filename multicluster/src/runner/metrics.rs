//! What a runner reports after each reconcile or pass ([`Report`]), and the hook that
//! records it ([`RunMetrics`]) — the library's [`ControllerMetrics`] or a caller's own.

use std::{sync::Arc, time::Duration};

use super::{Action, Outcome};
use crate::controller::{
    ControllerMetrics,
    metrics::{ControllerLabels, ReconcileLabels},
};

/// One reconcile (or pass), as a runner saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// What happens next.
    pub action: Action,
    /// How long it took.
    pub took: Duration,
    /// Keys ready in the queue afterwards (0 for a pass runner).
    pub queue_depth: usize,
}

/// Records what a runner reports. Implement it to keep a controller's own series.
pub trait RunMetrics: Send + Sync {
    /// After each reconcile or pass.
    fn reconciled(&self, report: &Report);
    /// A worker passed the gate and takes keys (or passes) from now on.
    fn worker_started(&self) {}
    /// That worker stopped.
    fn worker_stopped(&self) {}
}

/// [`ControllerMetrics`] of one named controller, as a [`RunMetrics`].
pub struct Named {
    metrics: Arc<ControllerMetrics>,
    labels: ControllerLabels,
}

impl ControllerMetrics {
    /// This process's controller metrics, recorded under the controller name `name`.
    pub fn named(self: &Arc<Self>, name: impl Into<String>) -> Arc<dyn RunMetrics> {
        Arc::new(Named {
            metrics: self.clone(),
            labels: ControllerLabels {
                controller: name.into(),
            },
        })
    }
}

impl RunMetrics for Named {
    fn reconciled(&self, report: &Report) {
        let m = &self.metrics;
        m.reconciles
            .get_or_create(&ReconcileLabels {
                controller: self.labels.controller.clone(),
                result: report.outcome.as_str(),
            })
            .inc();
        m.reconcile_duration
            .get_or_create(&self.labels)
            .observe(report.took.as_secs_f64());
        m.queue_depth
            .get_or_create(&self.labels)
            .set(report.queue_depth as i64);
    }
}

/// Calls [`RunMetrics::worker_stopped`] when dropped.
pub(super) struct Started(pub(super) Option<Arc<dyn RunMetrics>>);

impl Started {
    pub(super) fn new(metrics: Option<Arc<dyn RunMetrics>>) -> Self {
        if let Some(m) = &metrics {
            m.worker_started();
        }
        Started(metrics)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.worker_stopped();
        }
    }
}
