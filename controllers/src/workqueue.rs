//! A small work queue for controllers: keys are deduplicated while waiting, a key being
//! processed is never processed twice at once (a change that arrives meanwhile runs it
//! again afterwards), delayed requeues, and a fixed number of concurrent workers.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::Hash,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::Notify;

struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Keys that changed while being processed: they go back on the queue when done.
    dirty: HashSet<K>,
    shutdown: bool,
}

/// A deduplicating work queue shared by producers and workers.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    delayed: Mutex<HashMap<K, tokio::task::JoinHandle<()>>>,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
            delayed: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state is a set of plain collections, valid after any panic in a holder.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a key now (no-op when already queued; re-run later when in progress).
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if s.shutdown {
            return;
        }
        if s.active.contains(&key) {
            s.dirty.insert(key);
            return;
        }
        if s.queued.insert(key.clone()) {
            s.queue.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues a key after a delay. A later delayed add of the same key replaces this one;
    /// an immediate add does not cancel it.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let this = Arc::downgrade(self);
        let k = key.clone();
        let handle = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(q) = this.upgrade() {
                q.delayed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&k);
                q.add(k);
            }
        });
        let mut delayed = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = delayed.insert(key, handle) {
            old.abort();
        }
    }

    /// Cancels a pending delayed add of the key.
    pub fn forget(&self, key: &K) {
        if let Some(h) = self
            .delayed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
        {
            h.abort();
        }
    }

    /// Waits for the next key; `None` after shutdown. Call [`WorkQueue::done`] when finished.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if s.shutdown {
                    return None;
                }
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    s.active.insert(key.clone());
                    let more = !s.queue.is_empty();
                    drop(s);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Marks a key finished; if it changed meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.active.remove(key);
        if s.dirty.remove(key) && s.queued.insert(key.clone()) {
            s.queue.push_back(key.clone());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting delayed ones or those in progress).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: workers get `None`, adds are ignored.
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
        for (_, h) in self
            .delayed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn a_key_changed_while_in_progress_runs_again_after_done() {
        let q = WorkQueue::new();
        q.add(1);
        let k = q.next().await;
        assert_eq!(k, Some(1));
        q.add(1);
        assert!(
            q.is_empty(),
            "must not be handed to a second worker while active"
        );
        q.done(&1);
        assert_eq!(q.next().await, Some(1));
    }

    #[tokio::test]
    async fn delayed_adds_arrive_after_the_delay() {
        let q = WorkQueue::new();
        q.add_after(7, Duration::from_millis(30));
        assert!(q.is_empty());
        let got = tokio::time::timeout(Duration::from_secs(2), q.next()).await;
        assert_eq!(got.ok().flatten(), Some(7));
    }

    #[tokio::test]
    async fn shutdown_releases_waiting_workers() {
        let q: Arc<WorkQueue<u8>> = WorkQueue::new();
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        q.shutdown();
        assert_eq!(waiter.await.ok().flatten(), None);
    }
}
