//! The controllers' work queue: keys are deduplicated while waiting, a key being processed
//! is never handed to a second worker (a change that arrives meanwhile runs it again
//! afterwards), delayed adds, per-key exponential backoff, and any number of workers.
//!
//! Like kube-runtime's scheduler, the earliest request for a key wins: a delayed add never
//! postpones an earlier pending one (immediate or delayed), and an immediate add of a key
//! with a pending delayed add runs it now. Delayed adds live in one ordered map of
//! deadlines that the waiting workers sleep on — no task per key, no background task.
//! The queue decides nothing about what a key means.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    hash::Hash,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// The first backoff step; the n-th consecutive failure waits `BACKOFF_BASE * 2^n`.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest backoff.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// When a delayed add is due; the sequence number keeps equal instants apart.
type Deadline = (Instant, u64);

struct State<K> {
    /// Keys ready to be handed out, in order, each with when it became ready (for
    /// [`WorkQueue::oldest_wait`]: one clock read per key queued, nothing per scrape).
    ready: VecDeque<(K, Instant)>,
    /// The keys of `ready`.
    queued: HashSet<K>,
    /// Keys handed to a worker and not yet done.
    active: HashSet<K>,
    /// Active keys that were added again: they go back on the queue when done.
    dirty: HashSet<K>,
    /// Pending delayed adds by key. A key here is never queued or dirty as well.
    scheduled: HashMap<K, Deadline>,
    /// The same delayed adds, by deadline.
    deadlines: BTreeMap<Deadline, K>,
    next_seq: u64,
    /// Consecutive failures per key, for [`WorkQueue::add_rate_limited`].
    failures: HashMap<K, u32>,
    shutdown: bool,
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Makes a key ready (or dirty when active); true when a worker should be woken.
    fn enqueue(&mut self, key: K) -> bool {
        self.enqueue_since(key, None)
    }

    /// [`State::enqueue`], the key ready since `since` (now when `None`).
    fn enqueue_since(&mut self, key: K, since: Option<Instant>) -> bool {
        if self.active.contains(&key) {
            self.dirty.insert(key);
            false
        } else if self.queued.insert(key.clone()) {
            self.ready
                .push_back((key, since.unwrap_or_else(Instant::now)));
            true
        } else {
            false
        }
    }

    fn unschedule(&mut self, key: &K) {
        if let Some(deadline) = self.scheduled.remove(key) {
            self.deadlines.remove(&deadline);
        }
    }

    /// Schedules `key` at `at` unless an earlier run is already pending; true when this
    /// became the earliest deadline (sleeping workers must re-arm their timer).
    fn schedule(&mut self, key: K, at: Instant) -> bool {
        if self.queued.contains(&key) || self.dirty.contains(&key) {
            return false;
        }
        if self.scheduled.get(&key).is_some_and(|(t, _)| *t <= at) {
            return false;
        }
        self.unschedule(&key);
        let deadline = (at, self.next_seq);
        self.next_seq += 1;
        self.scheduled.insert(key.clone(), deadline);
        self.deadlines.insert(deadline, key);
        self.deadlines.first_key_value().map(|(d, _)| *d) == Some(deadline)
    }

    /// Moves every delayed add that is due onto the queue, earliest first.
    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let at = entry.key().0;
            let key = entry.remove();
            self.scheduled.remove(&key);
            // Ready since it fell due, not since a worker happened to look.
            self.enqueue_since(key, Some(at));
        }
    }
}

/// The delay before the `failures`-th consecutive retry: 1 s, 2 s, 4 s, ... at most 60 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE
        .saturating_mul(1 << failures.min(7))
        .min(BACKOFF_MAX)
}

/// A deduplicating work queue shared by producers and workers.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    /// Wakes workers: one for a new ready key, all for shutdown or an earlier deadline.
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                scheduled: HashMap::new(),
                deadlines: BTreeMap::new(),
                next_seq: 0,
                failures: HashMap::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state is a set of plain collections, valid after any panic in a holder.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a key now, replacing a pending delayed add of it (no-op when already queued;
    /// run again after [`WorkQueue::done`] when in progress).
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if s.shutdown {
            return;
        }
        s.unschedule(&key);
        if s.enqueue(key) {
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues a key after `delay`, unless it is already due earlier (queued, to run again
    /// after its current run, or delayed less).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut s = self.lock();
        if s.shutdown {
            return;
        }
        if s.schedule(key, Instant::now() + delay) {
            drop(s);
            self.notify.notify_waiters();
        }
    }

    /// Counts one more consecutive failure of `key` and queues it after the backoff that
    /// follows: 1 s after the first failure, doubling up to 60 s. Returns that delay.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let delay = {
            let mut s = self.lock();
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            backoff(*n)
        };
        self.add_after(key, delay);
        delay
    }

    /// Resets the backoff of `key` (after a success).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key; `None` after shutdown. Call [`WorkQueue::done`] when finished.
    pub async fn next(&self) -> Option<K> {
        // A key handed out at once is work done without waiting: each call counts against
        // the task's cooperative budget (before a key is taken, so a caller that drops this
        // future loses none), and a consumer that never waits still lets the other tasks of
        // its thread run.
        tokio::task::coop::consume_budget().await;
        loop {
            // Created before looking, so a wake-up between the look and the wait is kept.
            let notified = self.notify.notified();
            let next_deadline = {
                let mut s = self.lock();
                if s.shutdown {
                    return None;
                }
                s.promote_due(Instant::now());
                if let Some((key, _)) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.active.insert(key.clone());
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                s.deadlines.first_key_value().map(|((at, _), _)| *at)
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks a key finished; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.active.remove(key);
        if s.dirty.remove(key) && s.enqueue(key.clone()) {
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Keys ready to be handed out (not counting delayed ones or those in progress).
    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }

    /// How long the key at the head of the queue has been ready and not handed out, or a
    /// delayed add has been due and not yet moved onto the queue, whichever is longer; zero
    /// when nothing waits. Keys leave in order, so a head that keeps ageing means workers
    /// that take no key (stuck, starved or never started), not merely a long queue. Delayed
    /// adds count from their deadline, keys re-added while in progress from their `done`.
    pub fn oldest_wait(&self) -> Duration {
        let s = self.lock();
        let now = Instant::now();
        let head = s.ready.front().map(|(_, since)| *since);
        let due = s
            .deadlines
            .first_key_value()
            .map(|((at, _), _)| *at)
            .filter(|at| *at <= now);
        head.into_iter()
            .chain(due)
            .min()
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// Whether no key is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether no key is ready or in a worker's hands (delayed adds not counted): a pass
    /// that sums what the workers decided waits for this, so it does not write a partial sum
    /// while a burst (a start-up) is still being worked through.
    pub fn is_idle(&self) -> bool {
        let s = self.lock();
        s.ready.is_empty() && s.active.is_empty()
    }

    /// The keys ready or in a worker's hands (delayed adds not counted): those whose run
    /// is about to happen or under way — a batching writer can wait for what they bring.
    pub fn waiting(&self) -> HashSet<K> {
        let s = self.lock();
        s.queued.iter().chain(s.active.iter()).cloned().collect()
    }

    /// Stops the queue: workers get `None`, adds are ignored, delayed adds are dropped.
    pub fn shutdown(&self) {
        {
            let mut s = self.lock();
            s.shutdown = true;
            s.scheduled.clear();
            s.deadlines.clear();
        }
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits for the next key and says how long it took (exact under paused time).
    async fn next_after<K: Clone + Eq + Hash + Send + 'static>(
        q: &WorkQueue<K>,
    ) -> (Option<K>, Duration) {
        let started = Instant::now();
        let key = q.next().await;
        (key, started.elapsed())
    }

    /// Whether nothing more comes out within an hour (of paused time).
    async fn stays_empty<K: Clone + Eq + Hash + Send + 'static>(q: &WorkQueue<K>) -> bool {
        tokio::time::timeout(Duration::from_secs(3600), q.next())
            .await
            .is_err()
    }

    const S: Duration = Duration::from_secs(1);
    const ZERO: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_key_added_twice_while_waiting_is_processed_once() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.next().await, Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_wait_is_the_heads_and_ends_when_a_worker_takes_it() {
        let q = WorkQueue::new();
        assert_eq!(q.oldest_wait(), ZERO);
        q.add("a");
        tokio::time::advance(3 * S).await;
        q.add("b");
        tokio::time::advance(2 * S).await;
        assert_eq!(q.oldest_wait(), 5 * S);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.oldest_wait(), 2 * S, "b is the head now");
        assert_eq!(q.next().await, Some("b"));
        assert_eq!(q.oldest_wait(), ZERO, "keys in progress do not wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_waits_from_its_deadline_even_before_a_worker_looks() {
        let q = WorkQueue::new();
        q.add_after("a", 10 * S);
        tokio::time::advance(4 * S).await;
        assert_eq!(q.oldest_wait(), ZERO, "not due yet");
        tokio::time::advance(10 * S).await;
        assert_eq!(q.oldest_wait(), 4 * S, "due 4 s ago, no worker looked");
        q.add("b");
        tokio::time::advance(S).await;
        // A worker's look moves "a" onto the queue ready since its deadline, ahead of "b".
        assert_eq!(q.next().await, Some("b"));
        assert_eq!(q.oldest_wait(), 5 * S);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.oldest_wait(), ZERO);
    }

    #[tokio::test]
    async fn the_queue_is_idle_with_nothing_ready_or_in_progress() {
        let q = WorkQueue::new();
        assert!(q.is_idle());
        q.add_after("later", S);
        assert!(q.is_idle(), "a delayed add does not count");
        q.add("a");
        assert!(!q.is_idle());
        assert_eq!(q.next().await, Some("a"));
        assert!(!q.is_idle(), "in a worker's hands");
        q.done(&"a");
        assert!(q.is_idle());
    }

    #[tokio::test]
    async fn the_waiting_keys_are_the_ready_and_the_active_ones_not_the_delayed() {
        let q = WorkQueue::new();
        q.add_after("later", S);
        q.add("a");
        q.add("b");
        assert_eq!(q.next().await, Some("a"));
        let waiting = q.waiting();
        assert_eq!(waiting, HashSet::from(["a", "b"]));
        q.done(&"a");
        assert_eq!(q.waiting(), HashSet::from(["b"]));
    }

    #[tokio::test]
    async fn a_key_changed_while_in_progress_runs_again_after_done() {
        let q = WorkQueue::new();
        q.add(1);
        assert_eq!(q.next().await, Some(1));
        q.add(1);
        assert!(q.is_empty(), "not handed to a second worker while active");
        q.done(&1);
        assert_eq!(q.next().await, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_arrives_after_its_delay() {
        let q = WorkQueue::new();
        q.add_after(7, 3 * S);
        assert!(q.is_empty());
        assert_eq!(next_after(&q).await, (Some(7), 3 * S));
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_delayed_add_never_postpones_an_earlier_one() {
        let q = WorkQueue::new();
        q.add_after(1, S);
        q.add_after(1, 5 * S);
        assert_eq!(next_after(&q).await, (Some(1), S));
        q.done(&1);
        assert!(stays_empty(&q).await, "the later add was merged away");
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_delayed_add_replaces_a_later_one() {
        let q = WorkQueue::new();
        q.add_after(1, 5 * S);
        q.add_after(1, S);
        assert_eq!(next_after(&q).await, (Some(1), S));
        q.done(&1);
        assert!(stays_empty(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_add_of_a_delayed_key_runs_it_now_and_only_once() {
        let q = WorkQueue::new();
        q.add_after(1, 5 * S);
        q.add(1);
        assert_eq!(next_after(&q).await, (Some(1), ZERO));
        q.done(&1);
        assert!(stays_empty(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_of_a_queued_key_changes_nothing() {
        let q = WorkQueue::new();
        q.add(1);
        q.add_after(1, S);
        assert_eq!(next_after(&q).await, (Some(1), ZERO));
        q.done(&1);
        assert!(stays_empty(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_due_while_in_progress_runs_again_after_done() {
        let q = WorkQueue::new();
        q.add(1);
        assert_eq!(q.next().await, Some(1));
        q.add_after(1, S);
        tokio::time::sleep(2 * S).await;
        let second_worker = tokio::time::timeout(S, q.next()).await;
        assert!(second_worker.is_err(), "not handed out while active");
        q.done(&1);
        assert_eq!(next_after(&q).await, (Some(1), ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_come_out_in_deadline_order() {
        let q = WorkQueue::new();
        q.add_after("a", 3 * S);
        q.add_after("b", S);
        q.add_after("c", 2 * S);
        assert_eq!(next_after(&q).await, (Some("b"), S));
        assert_eq!(next_after(&q).await, (Some("c"), S));
        assert_eq!(next_after(&q).await, (Some("a"), S));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_wakes_for_a_new_earlier_deadline() {
        let q = WorkQueue::new();
        q.add_after(1, 10 * S);
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { next_after(&q).await })
        };
        tokio::task::yield_now().await;
        q.add_after(2, S);
        assert_eq!(worker.await.ok(), Some((Some(2), S)));
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_exponentially_until_forgotten() {
        let q = WorkQueue::new();
        let delays: Vec<Duration> = (0..9).map(|_| q.add_rate_limited("k")).collect();
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        q.forget(&"k");
        assert_eq!(q.add_rate_limited("k"), S);
        // The earliest of those adds (1 s) is the one pending.
        assert_eq!(next_after(&q).await, (Some("k"), S));
        q.done(&"k");
        assert!(stays_empty(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_waiting_workers_and_drops_delayed_adds() {
        let q: Arc<WorkQueue<u8>> = WorkQueue::new();
        q.add_after(1, S);
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.ok().flatten(), None);
        q.add(2);
        assert_eq!(q.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_another_backs_off_is_handed_out_at_once() {
        let q = WorkQueue::new();
        q.add_rate_limited("failing");
        q.add("fresh");
        assert_eq!(next_after(&q).await, (Some("fresh"), ZERO));
        q.done(&"fresh");
        // The failing key still waits out its backoff.
        assert_eq!(next_after(&q).await, (Some("failing"), S));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_its_own_delayed_add_is_pending_is_handed_out_at_once() {
        let q = WorkQueue::new();
        q.add_after("k", 5 * S);
        q.add_rate_limited("k");
        q.add("k");
        assert_eq!(next_after(&q).await, (Some("k"), ZERO));
        q.done(&"k");
        assert!(
            stays_empty(&q).await,
            "the delayed adds were merged into the run"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_workers_each_get_a_key_at_once_while_delayed_keys_are_pending() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new();
        // Workers sleep on a deadline, as they do while lag rechecks are pending.
        q.add_after(1000, 60 * S);
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { next_after(&q).await })
            })
            .collect();
        tokio::task::yield_now().await;
        for k in 0..8 {
            q.add(k);
        }
        // Nobody calls done: each key must have reached its own worker, none waited.
        let mut got = Vec::new();
        for w in workers {
            let (key, waited) = w.await.expect("worker");
            assert_eq!(waited, ZERO);
            got.extend(key);
        }
        got.sort_unstable();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }
}
