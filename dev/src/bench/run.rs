//! One run's clusters and settings ([`Run`]), which every phase reads: clients, the
//! clusters' processes, the control plane's CPU so far, the counts and limits of the run.

use std::{
    sync::{Mutex, atomic::AtomicU64},
    time::Duration,
};

use flotilla_localenv::FaultProxy;
use kube::Client;

use super::{
    CP_THREAD,
    procfs::{cpu_of, threads_cpu},
    workload::Kind,
};

/// The clusters and settings every phase of a run uses.
pub(super) struct Run {
    pub(super) host: Client,
    pub(super) members: Vec<Client>,
    pub(super) kubefed_clusters: Vec<String>,
    /// The clusters' processes and their kinds.
    pub(super) procs: Vec<(u32, String)>,
    /// The control plane's process when it runs as a child.
    pub(super) cp_pid: Mutex<Option<u32>>,
    /// CPU seconds of control planes stopped by a restart (their processes or threads are
    /// gone, so their time is kept here).
    pub(super) cp_cpu_retired: Mutex<f64>,
    /// LISTs of federated objects the benchmark itself sent (convergence checks).
    pub(super) own_lists: AtomicU64,
    pub(super) objects: usize,
    /// Federated Deployments (the Deployment kind's count; `objects` is the ConfigMaps').
    pub(super) deployments: usize,
    /// Whether the fleet phases run (`--fleet-phases`).
    pub(super) fleet_phases: bool,
    /// The member behind a fault proxy (`--slow-member`).
    pub(super) slow: Option<SlowSetup>,
    /// Objects of the sequential-client phase (0: none).
    pub(super) sequential: usize,
    pub(super) concurrency: usize,
    pub(super) timeout: Duration,
    pub(super) steady: Duration,
    /// Whether the policy path runs (`--policy`).
    pub(super) policy: bool,
    /// The pull-mode agents (`--pull`), kept running for the whole run.
    pub(super) agents: Option<super::pull::Agents>,
}

/// The member the control plane reaches through a fault proxy, and the delay of its phase.
pub(super) struct SlowSetup {
    /// Its index among the members.
    pub(super) index: usize,
    pub(super) name: String,
    pub(super) latency: Duration,
    pub(super) proxy: FaultProxy,
}

impl Run {
    /// How many federated objects of `kind` the run writes.
    pub(super) fn objects_of(&self, kind: Kind) -> usize {
        match kind {
            Kind::ConfigMap => self.objects,
            Kind::Deployment => self.deployments,
        }
    }

    /// CPU seconds the control plane used so far.
    pub(super) fn cp_cpu(&self) -> f64 {
        let retired = *self
            .cp_cpu_retired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        retired + self.running_cp_cpu()
    }

    /// CPU seconds of the control plane running now.
    pub(super) fn running_cp_cpu(&self) -> f64 {
        match self.child_pid() {
            Some(pid) => cpu_of(&format!("/proc/{pid}/stat")),
            None => threads_cpu(CP_THREAD),
        }
    }

    /// Whether the members are joined in pull mode (`--pull`).
    pub(super) fn pull(&self) -> bool {
        self.agents.is_some()
    }

    /// CPU seconds the pull-mode agents used so far (0 without them).
    pub(super) fn agent_cpu(&self) -> f64 {
        if self.pull() {
            threads_cpu(super::pull::AGENT_THREAD)
        } else {
            0.0
        }
    }

    /// The control plane's pid when it runs as a child process.
    pub(super) fn child_pid(&self) -> Option<u32> {
        *self.cp_pid.lock().unwrap_or_else(|e| e.into_inner())
    }
}
