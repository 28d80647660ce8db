//! What a phase measures at its start and at its end: request counters of every API
//! server, the control plane's Events, CPU seconds of the control plane, this process, the clusters and the machine.
//! A phase's figures are differences of two snapshots.

use std::{collections::BTreeMap, time::Instant};

use super::{
    fleet::all_requests,
    host_events::HostEvents,
    procfs::{clusters_cpu, cpu_of, machine_busy},
    pull_report::PullRequests,
    requests::{RequestCounts, request_counts},
    run::Run,
};

/// Everything a phase measures at its start and end.
pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) members: Vec<RequestCounts>,
    pub(super) host: RequestCounts,
    /// The control plane's Events on the federated objects so far (`None`: not read).
    pub(super) host_events: Option<HostEvents>,
    pub(super) cp_cpu: f64,
    /// CPU seconds of the pull-mode agents' threads (0 without them).
    pub(super) agent_cpu: f64,
    pub(super) process_cpu: f64,
    pub(super) clusters_cpu: BTreeMap<String, f64>,
    pub(super) machine_busy: f64,
}

impl Snapshot {
    /// The figures now.
    pub(super) async fn take(run: &Run) -> anyhow::Result<Snapshot> {
        let members = futures::future::try_join_all(run.members.iter().map(request_counts)).await?;
        let host = request_counts(&run.host).await?;
        let host_events = HostEvents::take(&run.host).await;
        Ok(Snapshot {
            at: Instant::now(),
            members,
            host,
            host_events,
            cp_cpu: run.cp_cpu(),
            agent_cpu: run.agent_cpu(),
            process_cpu: cpu_of("/proc/self/stat"),
            clusters_cpu: clusters_cpu(&run.procs),
            machine_busy: machine_busy(),
        })
    }

    /// CPU seconds of the clusters' processes, all together.
    pub(super) fn clusters_cpu_total(&self) -> f64 {
        self.clusters_cpu.values().sum()
    }
}

/// Every request the host and the members served between two snapshots, split for pull
/// mode (see [`PullRequests`]).
pub(super) fn window_requests(
    before: &Snapshot,
    after: &Snapshot,
    target: &str,
    member_objects: usize,
) -> PullRequests {
    PullRequests::new(
        &all_requests(
            std::slice::from_ref(&before.host),
            std::slice::from_ref(&after.host),
        ),
        &all_requests(&before.members, &after.members),
        target,
        member_objects,
    )
}
