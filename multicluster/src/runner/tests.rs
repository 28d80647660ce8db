use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::{gate::Gate, workqueue::WorkQueue};

#[derive(Debug, thiserror::Error)]
#[error("failed on purpose")]
struct Failed;

/// Records every report and the workers running.
#[derive(Default)]
struct Recorded {
    reports: Mutex<Vec<Report>>,
    workers: Mutex<i64>,
}

impl RunMetrics for Recorded {
    fn reconciled(&self, report: &Report) {
        self.reports.lock().expect("unpoisoned").push(*report);
    }
    fn worker_started(&self) {
        *self.workers.lock().expect("unpoisoned") += 1;
    }
    fn worker_stopped(&self) {
        *self.workers.lock().expect("unpoisoned") -= 1;
    }
}

#[tokio::test(start_paused = true)]
async fn every_keyed_worker_takes_keys_once_the_gate_opens() {
    let queue = WorkQueue::new();
    for k in 0..4 {
        queue.add(k);
    }
    let (opener, gate) = Gate::new();
    let running = Arc::new(Mutex::new(0usize));
    let most = Arc::new(Mutex::new(0usize));
    let metrics = Arc::new(Recorded::default());
    let stop = CancellationToken::new();
    let runner = KeyedRunner::new("test", queue.clone())
        .concurrency(4)
        .gate(gate)
        .metrics(metrics.clone())
        .shutdown(stop.clone());
    let (r, m) = (running.clone(), most.clone());
    let task = tokio::spawn(runner.run(move |_key: i32| {
        let (running, most) = (r.clone(), m.clone());
        async move {
            {
                let mut n = running.lock().expect("unpoisoned");
                *n += 1;
                let mut most = most.lock().expect("unpoisoned");
                *most = (*most).max(*n);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            *running.lock().expect("unpoisoned") -= 1;
            Ok::<_, Infallible>(Action::AwaitChange)
        }
    }));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(queue.len(), 4, "nothing taken before the gate opens");
    assert_eq!(*metrics.workers.lock().expect("unpoisoned"), 0);
    opener.open();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        *most.lock().expect("unpoisoned"),
        4,
        "four keys reconciled at once"
    );
    assert_eq!(*metrics.workers.lock().expect("unpoisoned"), 4);
    assert_eq!(metrics.reports.lock().expect("unpoisoned").len(), 4);
    stop.cancel();
    task.await.expect("runner stops on shutdown");
    assert_eq!(
        *metrics.workers.lock().expect("unpoisoned"),
        0,
        "every worker stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_key_backs_off_doubling_and_a_success_resets_it() {
    let queue = WorkQueue::new();
    queue.add("k");
    let times = Arc::new(Mutex::new(Vec::new()));
    let metrics = Arc::new(Recorded::default());
    let t = times.clone();
    let start = Instant::now();
    let runner = KeyedRunner::new("test", queue.clone()).metrics(metrics.clone());
    let task = tokio::spawn(runner.run(move |_key: &'static str| {
        let times = t.clone();
        async move {
            let mut times = times.lock().expect("unpoisoned");
            times.push(start.elapsed());
            // Fails three times, then succeeds and asks for a requeue in 10 s.
            if times.len() <= 3 {
                Err(Failed)
            } else {
                Ok(Action::requeue(Duration::from_secs(10)))
            }
        }
    }));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let secs: Vec<u64> = times
        .lock()
        .expect("unpoisoned")
        .iter()
        .map(|d| d.as_secs())
        .collect();
    // 1 s, 2 s, 4 s of backoff; then the requeue every 10 s.
    assert_eq!(secs, vec![0, 1, 3, 7, 17, 27]);
    let outcomes: Vec<&str> = metrics
        .reports
        .lock()
        .expect("unpoisoned")
        .iter()
        .map(|r| r.outcome.as_str())
        .collect();
    assert_eq!(outcomes[..4], ["error", "error", "error", "success"]);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_failed_gate_stops_the_keyed_runner_without_a_reconcile() {
    let queue = WorkQueue::new();
    queue.add(1);
    let (gate, _task) = Gate::after(async { false });
    KeyedRunner::new("test", queue.clone())
        .concurrency(2)
        .gate(gate)
        .run(|_k: i32| async {
            panic!("no reconcile behind a failed gate") as Result<Action, Failed>
        })
        .await;
    assert_eq!(queue.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_wake_ups_within_the_debounce_is_one_pass() {
    let wake = Arc::new(Notify::new());
    let mut runner = PassRunner::new("test", wake.clone())
        .period(Duration::from_secs(300))
        .debounce(Duration::from_millis(200));
    let burst = {
        let wake = wake.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                wake.notify_one();
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    let start = Instant::now();
    assert_eq!(runner.next().await, Some(Wake::Changed));
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    runner.finish(Action::AwaitChange);
    burst.await.expect("burst sent");
    // Nothing more changed: the next pass is the period's, 300 s after the last one.
    let ended = Instant::now();
    assert_eq!(runner.next().await, Some(Wake::Timer));
    assert_eq!(
        ended.elapsed(),
        Duration::from_secs(300) + Duration::from_millis(200)
    );
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_backs_off_runs_again_after_the_retry_delay() {
    let wake = Arc::new(Notify::new());
    let metrics = Arc::new(Recorded::default());
    let mut fixed = PassRunner::new("fixed", wake.clone())
        .period(Duration::from_secs(300))
        .retry(Retry::Fixed(Duration::from_secs(5)))
        .metrics(metrics.clone());
    wake.notify_one();
    for _ in 0..3 {
        assert!(fixed.next().await.is_some());
        let at = Instant::now();
        fixed.finish(Action::backoff());
        assert_eq!(fixed.next().await, Some(Wake::Timer));
        assert_eq!(
            at.elapsed(),
            Duration::from_secs(5),
            "fixed retries do not grow"
        );
        fixed.finish(Action::backoff());
        wake.notify_one();
    }
    assert_eq!(
        metrics.reports.lock().expect("unpoisoned")[0].outcome,
        Outcome::Error
    );

    let mut growing = PassRunner::new("exponential", Arc::new(Notify::new()));
    let mut waits = Vec::new();
    for _ in 0..3 {
        growing.finish(Action::backoff());
        let at = Instant::now();
        growing.next().await;
        waits.push(at.elapsed().as_secs());
    }
    assert_eq!(waits, vec![1, 2, 4]);
    growing.finish(Action::requeue(Duration::from_secs(7)));
    let at = Instant::now();
    growing.next().await;
    assert_eq!(
        at.elapsed(),
        Duration::from_secs(7),
        "a requeue resets the backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn the_pass_runner_stops_on_shutdown_and_on_a_failed_gate() {
    let stop = CancellationToken::new();
    let mut runner = PassRunner::new("test", Arc::new(Notify::new())).shutdown(stop.clone());
    stop.cancel();
    assert_eq!(runner.next().await, None);

    let wake = Arc::new(Notify::new());
    let (gate, _task) = Gate::after(async { false });
    let mut gated = PassRunner::new("test", wake.clone()).gate(gate);
    wake.notify_one();
    assert_eq!(gated.next().await, None);
}

#[tokio::test(start_paused = true)]
async fn change_streams_and_deadlines_wake_the_pass_runner() {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let grace = Instant::now() + Duration::from_secs(30);
    let (send, msgs) = tokio::sync::mpsc::unbounded_channel();
    let debounce = Duration::from_millis(10);
    let mut runner = PassRunner::new("test", Arc::new(Notify::new()))
        .debounce(debounce)
        .wake_on_changes(rx)
        .wake_at(grace)
        .wake_on(futures::stream::iter([1, 2]))
        .wake_on_channel(msgs);
    // The stream's two items fold into one pass.
    assert_eq!(runner.next().await, Some(Wake::Changed));
    runner.finish(Action::AwaitChange);
    tx.send_replace(1);
    assert_eq!(runner.next().await, Some(Wake::Changed));
    runner.finish(Action::AwaitChange);
    send.send(()).expect("runner listening");
    assert_eq!(runner.next().await, Some(Wake::Changed));
    runner.finish(Action::AwaitChange);
    assert_eq!(runner.next().await, Some(Wake::Changed));
    assert_eq!(Instant::now(), grace + debounce);
}

/// A reconcile that never waits, on keys that are always queued again, on a runtime of one
/// thread: another task of that thread still runs (the runner yields between reconciles).
/// Without it the worker kept the thread as long as keys were queued — at 100 members a
/// control plane's health probes and metrics endpoint stopped answering for minutes.
#[test]
fn a_busy_keyed_worker_leaves_room_for_the_other_tasks_of_its_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let queue = WorkQueue::new();
    queue.add(0u8);
    let again = queue.clone();
    let runner = KeyedRunner::new("busy", queue.clone());
    runtime.spawn(runner.run(move |key: u8| {
        // Queued again while it runs: the queue is never empty.
        again.add(key);
        std::future::ready(Ok::<_, Infallible>(Action::await_change()))
    }));
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = ran.clone();
    runtime.spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ran.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let ran = ran.load(std::sync::atomic::Ordering::SeqCst);
    queue.shutdown();
    runtime.shutdown_background();
    assert!(ran, "the other task never ran");
}
