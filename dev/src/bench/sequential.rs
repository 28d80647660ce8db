//! The sequential client: what `kubectl apply -f` of a many-document file does — one writer,
//! a GET before each create, the next object only after the previous write returned — and
//! then one bulk delete (a DeleteCollection, as `kubectl delete --all` ends up doing).
//!
//! The concurrent phases hide a per-object delay behind their own parallelism: 16 writers
//! keep every worker busy, and a key that waits a second in the queue is overtaken by the
//! others. One writer exposes it: "all member objects present, after the last write
//! returned" is then the delay of the last object alone (raw: a watch event's latency).
//! This module writes and measures; what the figures mean is [`SequentialPhase`]'s.

use std::{collections::HashMap, time::Instant};

use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
};
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::{
    BENCH_LABEL, FED_NS, RAW_NS,
    report::{Percentiles, percentiles, ratio},
    requests::delta,
    run::Run,
    snapshot::Snapshot,
    tracker::{Tracker, Want},
    workload::{Kind, names},
};

/// A sequential stream of creates and a bulk delete, through one client.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SequentialPhase {
    /// Member objects (objects × members).
    pub member_objects: usize,
    /// First GET → last create returned (the client's own time, the same for Flotilla and
    /// raw up to the API servers' speed).
    pub writes_s: f64,
    /// Last create returned → every member object present: what the client waits for
    /// after it is done.
    pub present_after_last_write_s: f64,
    /// Per object: its create returned → present in every member.
    pub latency_ms: Percentiles,
    /// Member requests served during the creates / member objects (GETs of the client
    /// included on the raw side: 2.00 there).
    pub member_requests_per_member_object: f64,
    /// The bulk delete's own call (its objects are marked deleted, or gone, when it returns).
    pub bulk_delete_call_s: f64,
    /// Bulk delete returned → every member empty (0 when they were empty before it returned).
    pub empty_after_bulk_delete_s: f64,
}

/// Flotilla's sequential phase beside the raw one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SequentialComparison {
    /// Through the control plane (GET + POST of the federated object in the host).
    pub flotilla: SequentialPhase,
    /// Straight into the members (GET + POST per member, one writer per member, members in
    /// parallel).
    pub raw: SequentialPhase,
    /// present_after_last_write_s, flotilla / raw (`None` when raw is 0: the raw objects
    /// were present the moment their writes returned).
    pub present_ratio: Option<f64>,
    /// empty_after_bulk_delete_s, flotilla / raw (`None` when raw is 0).
    pub empty_ratio: Option<f64>,
}

impl SequentialComparison {
    pub(super) fn new(flotilla: SequentialPhase, raw: SequentialPhase) -> Self {
        let finite = |a: f64, b: f64| Some(ratio(a, b)).filter(|r| r.is_finite());
        SequentialComparison {
            present_ratio: finite(
                flotilla.present_after_last_write_s,
                raw.present_after_last_write_s,
            ),
            empty_ratio: finite(
                flotilla.empty_after_bulk_delete_s,
                raw.empty_after_bulk_delete_s,
            ),
            flotilla,
            raw,
        }
    }
}

/// When each object's create returned, and when the last one did.
struct Written {
    first: Instant,
    returned: HashMap<String, Instant>,
    last: Instant,
}

/// GET (expected 404) then POST for each name, one at a time.
async fn write_sequentially(
    api: &Api<DynamicObject>,
    names: &[String],
    object: impl Fn(&str) -> anyhow::Result<DynamicObject>,
) -> anyhow::Result<Written> {
    let first = Instant::now();
    let mut returned = HashMap::with_capacity(names.len());
    for name in names {
        if api.get_opt(name).await?.is_some() {
            anyhow::bail!("{name} exists before the sequential create");
        }
        api.create(&PostParams::default(), &object(name)?).await?;
        returned.insert(name.clone(), Instant::now());
    }
    Ok(Written {
        first,
        returned,
        last: Instant::now(),
    })
}

/// The figures of the create half, from the writes and when each object landed.
fn created(
    member_objects: usize,
    written: &Written,
    reached: &HashMap<String, Instant>,
    member_requests: u64,
) -> SequentialPhase {
    let landed = reached.values().max().copied().unwrap_or(written.last);
    let mut lat: Vec<f64> = written
        .returned
        .iter()
        .filter_map(|(n, t)| Some(reached.get(n)?.saturating_duration_since(*t)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    SequentialPhase {
        member_objects,
        writes_s: written
            .last
            .saturating_duration_since(written.first)
            .as_secs_f64(),
        present_after_last_write_s: landed.saturating_duration_since(written.last).as_secs_f64(),
        latency_ms: percentiles(&mut lat),
        member_requests_per_member_object: ratio(member_requests as f64, member_objects as f64),
        bulk_delete_call_s: 0.0,
        empty_after_bulk_delete_s: 0.0,
    }
}

/// Member requests for `kind` served between two snapshots, summed over the members.
fn member_requests(before: &Snapshot, after: &Snapshot, kind: Kind) -> u64 {
    let plural = kind.target().plural;
    before
        .members
        .iter()
        .zip(&after.members)
        .map(|(b, a)| {
            delta(b, a, &plural, |_, verb| verb.to_string())
                .values()
                .sum::<u64>()
        })
        .sum()
}

/// Seconds from `returned` until the tracker saw every object gone.
async fn drained_after(run: &Run, tracker: &Tracker, returned: Instant) -> anyhow::Result<f64> {
    let gone = tracker.wait(run.timeout).await?;
    let last = gone.values().max().copied().unwrap_or(returned);
    Ok(last.saturating_duration_since(returned).as_secs_f64())
}

/// Flotilla: the federated objects created one by one in the host (placed on every
/// member), then deleted with one DeleteCollection; `settle` waits for the host to be quiet
/// between the halves.
pub(super) async fn flotilla_sequential<S, SF>(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    settle: S,
) -> anyhow::Result<SequentialPhase>
where
    S: Fn() -> SF,
    SF: Future<Output = anyhow::Result<()>>,
{
    let names = &names(kind, run.sequential.min(run.objects_of(kind)));
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let before = Snapshot::take(run).await?;
    members.expect(Want::Version("1".into()), names);
    let written =
        write_sequentially(&api, names, |n| kind.federated_object(FED_NS, n, "1")).await?;
    let reached = members.wait(run.timeout).await?;
    // Counted once the host is quiet: a member apiserver counts a request after it has
    // answered it, which can be after the watch event that showed the object landed.
    settle().await?;
    let after = Snapshot::take(run).await?;
    let member_objects = names.len() * members.clusters();
    let mut phase = created(
        member_objects,
        &written,
        &reached,
        member_requests(&before, &after, kind),
    );
    members.expect(Want::Absent, names);
    let lp = ListParams::default().labels(&format!("{BENCH_LABEL}=fed"));
    let called = Instant::now();
    delete_all(&api, &DeleteParams::default(), &lp).await?;
    phase.bulk_delete_call_s = called.elapsed().as_secs_f64();
    phase.empty_after_bulk_delete_s = drained_after(run, members, Instant::now()).await?;
    settle().await?;
    Ok(phase)
}

/// Raw: the same objects created one by one straight into each member (one writer per
/// member, the members in parallel), then one DeleteCollection per member.
pub(super) async fn raw_sequential(
    run: &Run,
    kind: Kind,
    tracker: &Tracker,
) -> anyhow::Result<SequentialPhase> {
    let names = &names(kind, run.sequential.min(run.objects_of(kind)));
    let apis: Vec<Api<DynamicObject>> = run
        .members
        .iter()
        .map(|c| Api::namespaced_with(c.clone(), RAW_NS, &kind.target()))
        .collect();
    let before = Snapshot::take(run).await?;
    tracker.expect(Want::Version("1".into()), names);
    let writers = apis
        .iter()
        .map(|api| write_sequentially(api, names, |n| kind.raw_object(n, "1")));
    let all = futures::future::try_join_all(writers).await?;
    let reached = tracker.wait(run.timeout).await?;
    let after = Snapshot::take(run).await?;
    // One figure for all writers: each object returned when its last member's create did.
    let mut written = Written {
        first: all
            .iter()
            .map(|w| w.first)
            .min()
            .unwrap_or_else(Instant::now),
        returned: HashMap::new(),
        last: all
            .iter()
            .map(|w| w.last)
            .max()
            .unwrap_or_else(Instant::now),
    };
    for w in &all {
        for (n, t) in &w.returned {
            let e = written.returned.entry(n.clone()).or_insert(*t);
            *e = (*e).max(*t);
        }
    }
    let member_objects = names.len() * tracker.clusters();
    let mut phase = created(
        member_objects,
        &written,
        &reached,
        member_requests(&before, &after, kind),
    );
    tracker.expect(Want::Absent, names);
    let lp = ListParams::default().labels(&format!("{BENCH_LABEL}=raw"));
    let dp = DeleteParams::default();
    let deletes = apis.iter().map(|api| delete_all(api, &dp, &lp));
    let called = Instant::now();
    futures::future::try_join_all(deletes).await?;
    phase.bulk_delete_call_s = called.elapsed().as_secs_f64();
    phase.empty_after_bulk_delete_s = drained_after(run, tracker, Instant::now()).await?;
    Ok(phase)
}

/// Attempts of one bulk delete.
const BULK_DELETE_ATTEMPTS: u32 = 3;

/// One DeleteCollection, sent again when the API server failed it (an overloaded server
/// answers `500 context deadline exceeded` once its request timeout passes, having deleted
/// part of the collection): deleting what is left is the same request, so a retry is safe.
async fn delete_all(
    api: &Api<DynamicObject>,
    dp: &DeleteParams,
    lp: &ListParams,
) -> Result<(), kube::Error> {
    let mut attempt = 1;
    loop {
        match api.delete_collection(dp, lp).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < BULK_DELETE_ATTEMPTS && is_server_failure(&e) => {
                warn!(error = %e, attempt, "bulk delete failed; sending it again");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A failure of the server (5xx, or no answer), not a refusal of the request.
fn is_server_failure(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_the_servers_failures_send_a_bulk_delete_again() {
        let status = |code: u16| {
            let mut s = kube::core::Status::failure("context deadline exceeded", "");
            s.code = code;
            kube::Error::Api(Box::new(s))
        };
        assert!(is_server_failure(&status(500)));
        assert!(is_server_failure(&status(504)));
        assert!(!is_server_failure(&status(403)));
        assert!(!is_server_failure(&status(404)));
    }

    #[test]
    fn present_after_last_write_counts_from_the_last_create_not_the_first() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let written = Written {
            first: t0,
            returned: HashMap::from([("a".into(), t0 + ms(10)), ("b".into(), t0 + ms(20))]),
            last: t0 + ms(20),
        };
        let reached = HashMap::from([("a".into(), t0 + ms(1010)), ("b".into(), t0 + ms(270))]);
        let p = created(4, &written, &reached, 4);
        assert!((p.writes_s - 0.020).abs() < 1e-9);
        // "a" landed last, 990 ms after the last write returned.
        assert!((p.present_after_last_write_s - 0.990).abs() < 1e-9);
        assert!((p.latency_ms.max - 1000.0).abs() < 1e-6);
        assert!((p.member_requests_per_member_object - 1.0).abs() < 1e-9);
    }
}
