//! Member writes that outlive their reconcile. A reconcile sends every cluster's write at
//! once and waits for them together; a member that answers, but late (an overloaded or
//! distant API server, a slow link), would hold the sync worker for as long as its write
//! takes — and with a few workers, every other member's objects would wait behind it.
//!
//! So a reconcile waits for a write still running only up to [`wait_limit`], measured from
//! when its writes started and growing with the slowest write that finished. Past it the
//! write goes on in its own task and is recorded here as pending; the reconcile ends
//! without writing status (the status is still written once, with every cluster's result);
//! no second write goes to that member object meanwhile; and when the write lands its
//! federated object's key is queued again, and the next reconcile reports its result.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, stream::FuturesUnordered};
use tokio::sync::{mpsc, watch};
use tracing::Instrument as _;

use super::{
    Key, SyncShared,
    dispatch::{MemberOp, MemberRef, run_on_member},
    memory::RecentWrites,
    plan::Outcome,
    plan::lag::{Basis, LastOp},
};

/// The longest a reconcile waits for a write when no other write of it has finished.
pub const ALONE: Duration = Duration::from_secs(1);
/// The shortest wait once another write has finished.
pub const FLOOR: Duration = Duration::from_millis(100);
/// How many times the slowest finished write a write still running is waited for.
pub const FACTOR: u32 = 2;

/// How long after its writes started a reconcile stops waiting for those still running,
/// given how long the slowest of its finished writes took (`None`: none has finished).
pub fn wait_limit(slowest_finished: Option<Duration>) -> Duration {
    match slowest_finished {
        None => ALONE,
        Some(took) => took.saturating_mul(FACTOR).max(FLOOR),
    }
}

/// One cluster's part of a reconcile's writes.
#[derive(Clone, Debug, PartialEq)]
pub enum Written {
    /// The write's result (or the cluster needed none).
    Now(Outcome),
    /// The write goes on after the reconcile.
    InFlight,
}

/// What a reconcile finds of an earlier write to a member object.
#[derive(Clone, Debug, PartialEq)]
pub enum Earlier {
    /// None running, or one that succeeded (the caches and the recent-write memory say the
    /// rest): decide as usual.
    Settled,
    /// Still running: leave the member object alone.
    Pending,
    /// Landed after its reconcile, failed: this round's result for the cluster.
    Failed(Outcome),
}

enum Entry {
    Pending { detached: bool },
    Landed(Outcome),
}

/// The writes of one type's sync controller that are running, and those that landed after
/// their reconcile stopped waiting, per (cluster, federated key).
pub struct InFlight {
    entries: Mutex<HashMap<(String, Key), Entry>>,
    landed: mpsc::UnboundedSender<Key>,
}

impl InFlight {
    /// The registry, and the keys to queue again as detached writes land.
    pub fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<Key>) {
        let (landed, rx) = mpsc::unbounded_channel();
        let registry = InFlight {
            entries: Mutex::default(),
            landed,
        };
        (Arc::new(registry), rx)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Key), Entry>> {
        // A plain map stays valid after a panic in a holder.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What an earlier write to this member object left; a failure is handed over once.
    pub fn earlier(&self, cluster: &str, key: &Key) -> Earlier {
        let mut entries = self.entries();
        let k = (cluster.to_string(), key.clone());
        match entries.get(&k) {
            None => Earlier::Settled,
            Some(Entry::Pending { .. }) => Earlier::Pending,
            Some(Entry::Landed(_)) => match entries.remove(&k) {
                Some(Entry::Landed(o @ Outcome::Status(..))) => Earlier::Failed(o),
                _ => Earlier::Settled,
            },
        }
    }

    fn start(&self, cluster: &str, key: &Key) {
        let entry = Entry::Pending { detached: false };
        self.entries()
            .insert((cluster.to_string(), key.clone()), entry);
    }

    /// The write's task ended; a detached write's key is queued again.
    fn land(&self, cluster: &str, key: &Key, outcome: Outcome) {
        let mut entries = self.entries();
        let k = (cluster.to_string(), key.clone());
        let detached = matches!(entries.get(&k), Some(Entry::Pending { detached: true }));
        entries.insert(k, Entry::Landed(outcome));
        drop(entries);
        if detached {
            // The receiver ends with the controller; nothing is left to requeue then.
            let _ = self.landed.send(key.clone());
        }
    }

    /// The reconcile took the write's outcome itself.
    fn finish(&self, cluster: &str, key: &Key) {
        self.entries().remove(&(cluster.to_string(), key.clone()));
    }

    /// The reconcile stops waiting: the outcome, when the write landed meanwhile.
    fn detach(&self, cluster: &str, key: &Key) -> Option<Outcome> {
        let mut entries = self.entries();
        let k = (cluster.to_string(), key.clone());
        match entries.remove(&k) {
            Some(Entry::Landed(o)) => Some(o),
            Some(Entry::Pending { .. }) | None => {
                entries.insert(k, Entry::Pending { detached: true });
                None
            }
        }
    }
}

/// What a write remembers of itself once it landed (see [`RecentWrites`]), with what the
/// cache showed when it was decided.
pub enum Remember {
    /// A create or update of this hash (forgotten if an update failed: it may have deleted).
    Write(Option<String>, Basis, bool),
    /// A delete (forgotten if it failed).
    Delete(Basis),
    /// Nothing.
    Nothing,
}

/// Everything a write that may outlive its reconcile needs, owned.
pub struct Detachable {
    pub shared: Arc<SyncShared>,
    pub inflight: Arc<InFlight>,
    pub recent: Arc<RecentWrites>,
    pub key: Key,
    /// `false`: the reconcile waits for this write whatever it takes (a drift repair, whose
    /// result the round reports).
    pub may_detach: bool,
}

/// Sends one member write in its own task and waits for it until the reconcile's `detach`
/// signal; then leaves it running.
pub async fn write(
    d: Detachable,
    target: MemberRef,
    op: MemberOp,
    remember: Remember,
    mut detach: watch::Receiver<bool>,
) -> Written {
    let cluster = target.cluster.clone();
    let timed_out = op.timed_out();
    d.inflight.start(&cluster, &d.key);
    let (inflight, key, c) = (d.inflight.clone(), d.key.clone(), cluster.clone());
    let mut task = tokio::spawn(
        async move {
            let outcome = run_on_member(&d.shared, target, op).await;
            match remember {
                Remember::Write(hash, basis, _) if outcome == Outcome::Ok => {
                    let op = hash.map(|h| (LastOp::Wrote(h), basis));
                    d.recent.remember(&c, &d.key, op)
                }
                Remember::Delete(basis) if outcome == Outcome::Removing => {
                    d.recent
                        .remember(&c, &d.key, Some((LastOp::Deleted, basis)))
                }
                Remember::Write(_, _, true) | Remember::Delete(_) => {
                    d.recent.remember(&c, &d.key, None)
                }
                Remember::Write(..) | Remember::Nothing => {}
            }
            d.inflight.land(&c, &d.key, outcome.clone());
            outcome
        }
        // The member write's span is a child of the reconcile's, even when the write outlives it.
        .in_current_span(),
    );
    let detached = async {
        if !d.may_detach {
            return std::future::pending().await;
        }
        // A dropped sender means the reconcile has gathered everything; wait on.
        if detach.wait_for(|d| *d).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        joined = &mut task => {
            inflight.finish(&cluster, &key);
            Written::Now(joined.unwrap_or_else(|e| Outcome::Status(
                timed_out,
                format!("the write ended without a result: {e}"),
            )))
        }
        () = detached => match inflight.detach(&cluster, &key) {
            Some(outcome) => Written::Now(outcome),
            None => Written::InFlight,
        },
    }
}

/// The signal a reconcile's writes wait on ([`write`]) and [`gather`] raises.
pub fn detach_signal() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}

/// Runs one reconcile's writes together (each names its cluster and waits on `detach`'s
/// signal), raising the signal once those still running are past [`wait_limit`]: every
/// cluster's outcome, and the clusters whose writes are still in flight.
pub async fn gather<F>(
    writes: Vec<F>,
    detach: watch::Sender<bool>,
) -> (BTreeMap<String, Outcome>, BTreeSet<String>)
where
    F: Future<Output = (String, Written)>,
{
    // Tokio's clock, so that a paused test clock moves it too.
    let started = tokio::time::Instant::now();
    let mut running: FuturesUnordered<F> = writes.into_iter().collect();
    let (mut outcomes, mut in_flight) = (BTreeMap::new(), BTreeSet::new());
    let mut slowest: Option<Duration> = None;
    while !running.is_empty() {
        let deadline = started + wait_limit(slowest);
        tokio::select! {
            next = running.next() => {
                let Some((cluster, written)) = next else { break };
                match written {
                    Written::Now(o) => {
                        outcomes.insert(cluster, o);
                        // They finish in order: the last one is the slowest so far.
                        slowest = Some(started.elapsed());
                    }
                    Written::InFlight => {
                        in_flight.insert(cluster);
                    }
                }
            }
            () = tokio::time::sleep_until(deadline), if !*detach.borrow() => {
                let _ = detach.send(true);
            }
        }
    }
    (outcomes, in_flight)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::ClusterReason;

    fn key(name: &str) -> Key {
        (Some("ns".into()), name.into())
    }

    #[test]
    fn the_wait_grows_with_the_slowest_finished_write() {
        assert_eq!(wait_limit(None), ALONE);
        assert_eq!(wait_limit(Some(Duration::from_millis(10))), FLOOR);
        assert_eq!(
            wait_limit(Some(Duration::from_millis(500))),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_write_taken_by_its_reconcile_leaves_nothing_behind() {
        let (registry, mut landed) = InFlight::new();
        registry.start("m1", &key("a"));
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Pending);
        registry.land("m1", &key("a"), Outcome::Ok);
        registry.finish("m1", &key("a"));
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Settled);
        assert!(landed.try_recv().is_err(), "nothing to requeue");
    }

    #[test]
    fn a_detached_write_requeues_its_key_and_hands_a_failure_over_once() {
        let (registry, mut landed) = InFlight::new();
        registry.start("m1", &key("a"));
        assert_eq!(registry.detach("m1", &key("a")), None);
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Pending);
        assert_eq!(registry.earlier("m2", &key("a")), Earlier::Settled);
        let failed = Outcome::Status(ClusterReason::CreationFailed, "denied".into());
        registry.land("m1", &key("a"), failed.clone());
        assert_eq!(landed.try_recv().ok(), Some(key("a")));
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Failed(failed));
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Settled);
    }

    #[test]
    fn a_detached_write_that_succeeded_is_settled() {
        let (registry, mut landed) = InFlight::new();
        registry.start("m1", &key("a"));
        registry.detach("m1", &key("a"));
        registry.land("m1", &key("a"), Outcome::Ok);
        assert!(landed.try_recv().is_ok());
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Settled);
    }

    #[test]
    fn a_write_that_landed_before_the_detach_is_taken_at_once() {
        let (registry, mut landed) = InFlight::new();
        registry.start("m1", &key("a"));
        registry.land("m1", &key("a"), Outcome::Ok);
        assert_eq!(registry.detach("m1", &key("a")), Some(Outcome::Ok));
        assert_eq!(registry.earlier("m1", &key("a")), Earlier::Settled);
        assert!(landed.try_recv().is_err());
    }

    /// A write of `took` that obeys the detach signal like [`write`] does.
    async fn fake(
        cluster: &str,
        took: Duration,
        mut detach: watch::Receiver<bool>,
    ) -> (String, Written) {
        tokio::select! {
            () = tokio::time::sleep(took) => (cluster.to_string(), Written::Now(Outcome::Ok)),
            _ = detach.wait_for(|d| *d) => (cluster.to_string(), Written::InFlight),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn gather_leaves_only_the_straggler_behind() {
        let (detach, signal) = detach_signal();
        let ms = Duration::from_millis;
        let writes = vec![
            Box::pin(fake("fast1", ms(20), signal.clone())),
            Box::pin(fake("fast2", ms(40), signal.clone())),
            Box::pin(fake("slow", ms(4000), signal.clone())),
        ];
        drop(signal);
        let started = tokio::time::Instant::now();
        let (outcomes, in_flight) = gather(writes, detach).await;
        assert_eq!(outcomes.keys().collect::<Vec<_>>(), ["fast1", "fast2"]);
        assert_eq!(in_flight.into_iter().collect::<Vec<_>>(), ["slow"]);
        // 2 × 40 ms is below the floor (the paused clock's timers round up to 1 ms).
        let waited = started.elapsed();
        assert!(
            waited >= FLOOR && waited <= FLOOR + Duration::from_millis(2),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gather_waits_for_writes_that_are_all_slow_alike() {
        let (detach, signal) = detach_signal();
        let ms = Duration::from_millis;
        let writes = vec![
            Box::pin(fake("a", ms(600), signal.clone())),
            Box::pin(fake("b", ms(900), signal.clone())),
            Box::pin(fake("c", ms(1500), signal.clone())),
        ];
        drop(signal);
        let (outcomes, in_flight) = gather(writes, detach).await;
        assert_eq!(outcomes.len(), 3);
        assert!(in_flight.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_write_is_waited_for_until_alone() {
        let (detach, signal) = detach_signal();
        let writes = vec![Box::pin(fake(
            "only",
            Duration::from_secs(5),
            signal.clone(),
        ))];
        drop(signal);
        let started = tokio::time::Instant::now();
        let (outcomes, in_flight) = gather(writes, detach).await;
        assert!(outcomes.is_empty());
        assert_eq!(in_flight.len(), 1);
        let waited = started.elapsed();
        assert!(
            waited >= ALONE && waited <= ALONE + Duration::from_millis(2),
            "{waited:?}"
        );
    }
}
