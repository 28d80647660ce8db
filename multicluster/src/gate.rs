//! A readiness gate that opens for every waiter at once: for the workers of a controller
//! that must not start before their caches are complete.
//!
//! Why not let each worker await `Store::wait_until_ready`: kube-runtime's store keeps its
//! readiness in a one-shot channel that remembers **one** waker, the last task that polled
//! it. With N workers awaiting one store, the store's first sync wakes one worker and the
//! other N − 1 sleep for good — the controller then runs with a single worker and every
//! object of a stream waits for all the ones before it (Flotilla's sync controller lost
//! ~1 s per object this way). A gate awaits the condition in **one** task and fans the
//! result out over a `watch` channel, which wakes every receiver. That one task should wait
//! for a store with [`store_ready`], which a readiness check elsewhere cannot put to sleep.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use flotilla_multicluster::gate::Gate;
//!
//! let (gate, task) = Gate::after(async { /* e.g. gate::store_ready(&store).await */ true });
//! let workers: Vec<_> = (0..4)
//!     .map(|_| {
//!         let gate = gate.clone();
//!         tokio::spawn(async move { gate.opened().await })
//!     })
//!     .collect();
//! for w in workers {
//!     assert!(w.await.unwrap());
//! }
//! task.await.unwrap();
//! # }
//! ```

use std::{fmt::Debug, future::Future, hash::Hash, time::Duration};

use kube::{Resource, runtime::reflector::Store};
use tokio::{sync::watch, task::JoinHandle};

/// How often [`store_ready`] polls a store's readiness again.
const READY_REPOLL: Duration = Duration::from_millis(100);

/// Waits until `store` has its first complete list (`false` if its writer was dropped
/// first). Unlike awaiting `Store::wait_until_ready` alone, it cannot be left asleep by
/// another task polling the same store's readiness (a `now_or_never` check elsewhere
/// replaces the one waker the store keeps): it polls again every 100 ms. Meant for the one
/// task behind a [`Gate`].
pub async fn store_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug,
{
    loop {
        if let Ok(ready) = tokio::time::timeout(READY_REPOLL, store.wait_until_ready()).await {
            return ready.is_ok();
        }
    }
}

/// Whether the gate is open; cloned into every waiter.
#[derive(Clone, Debug)]
pub struct Gate(watch::Receiver<State>);

/// What the gate says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The condition is still awaited.
    Closed,
    /// The condition held: go ahead.
    Open,
    /// The condition failed (e.g. the store's writer was dropped): never opens.
    Failed,
}

/// Opens (or fails) the [`Gate`] it was made with; dropping it unopened fails the gate.
#[derive(Debug)]
pub struct Opener(watch::Sender<State>);

impl Opener {
    /// Opens the gate for every waiter, present and future.
    pub fn open(self) {
        self.0.send_replace(State::Open);
    }

    /// The gate will never open: every waiter gets `false`.
    pub fn fail(self) {
        self.0.send_replace(State::Failed);
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.0.send_if_modified(|s| {
            let closed = *s == State::Closed;
            if closed {
                *s = State::Failed;
            }
            closed
        });
    }
}

impl Gate {
    /// A closed gate and the one handle that opens it.
    pub fn new() -> (Opener, Gate) {
        let (tx, rx) = watch::channel(State::Closed);
        (Opener(tx), Gate(rx))
    }

    /// A gate that opens when `ready` resolves to `true` (and fails on `false`), awaited
    /// by one spawned task.
    pub fn after<F>(ready: F) -> (Gate, JoinHandle<()>)
    where
        F: Future<Output = bool> + Send + 'static,
    {
        let (opener, gate) = Gate::new();
        let task = tokio::spawn(async move {
            if ready.await {
                opener.open();
            } else {
                opener.fail();
            }
        });
        (gate, task)
    }

    /// Waits until the gate opens (`true`) or fails (`false`).
    pub async fn opened(&self) -> bool {
        let mut rx = self.0.clone();
        match rx.wait_for(|s| *s != State::Closed).await {
            Ok(s) => *s == State::Open,
            Err(_) => false,
        }
    }

    /// Whether the gate is open now.
    pub fn is_open(&self) -> bool {
        *self.0.borrow() == State::Open
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn every_waiter_wakes_when_the_gate_opens_after_they_all_waited() {
        let (opener, gate) = Gate::new();
        let waiters: Vec<_> = (0..16)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.opened().await })
            })
            .collect();
        // Every waiter is parked before the gate opens.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!gate.is_open());
        opener.open();
        for w in waiters {
            let woke = tokio::time::timeout(Duration::from_secs(1), w).await;
            assert_eq!(woke.ok().and_then(Result::ok), Some(true));
        }
        assert!(gate.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_condition_releases_every_waiter_with_false() {
        let (gate, task) = Gate::after(async { false });
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.opened().await })
            })
            .collect();
        task.await.ok();
        for w in waiters {
            assert_eq!(w.await.ok(), Some(false));
        }
    }

    #[tokio::test]
    async fn a_dropped_opener_fails_the_gate() {
        let (opener, gate) = Gate::new();
        drop(opener);
        assert!(!gate.opened().await);
    }

    #[tokio::test]
    async fn a_waiter_that_comes_after_the_opening_passes_at_once() {
        let (opener, gate) = Gate::new();
        opener.open();
        assert!(gate.clone().opened().await);
    }

    #[tokio::test(start_paused = true)]
    async fn every_worker_wakes_when_a_kube_store_behind_the_gate_syncs() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::{reflector::store::Writer, watcher::Event};

        let mut writer = Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let (gate, _task) = Gate::after(async move { store_ready(&store).await });
        let workers: Vec<_> = (0..16)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.opened().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        writer.apply_watcher_event(&Event::Init);
        // Another task checks the readiness meanwhile (as a periodic resync does), taking
        // the store's one waker from the gate's task.
        let store = writer.as_reader();
        tokio::spawn(async move {
            use futures::FutureExt;
            let _ = store.wait_until_ready().now_or_never();
        })
        .await
        .ok();
        writer.apply_watcher_event(&Event::InitDone);
        for w in workers {
            let woke = tokio::time::timeout(Duration::from_secs(1), w).await;
            assert_eq!(woke.ok().and_then(Result::ok), Some(true));
        }
    }
}
