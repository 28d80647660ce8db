//! The pass runner, for level-triggered controllers that look at everything at once: it
//! waits for a wake-up (a [`Notify`], a change stream, a deadline) or a timer, lets a
//! burst of changes settle (debounce), waits behind an optional [`Gate`], and hands the
//! caller one pass; the pass's [`Action`] sets the timer (the period, a requeue, or a
//! retry after a failure). The caller owns the pass and its state: it drives the runner
//! with [`PassRunner::next`] and [`PassRunner::finish`].

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, Stream, StreamExt};
use tokio::{
    sync::{Notify, mpsc, watch},
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{Action, Outcome, Report, RunMetrics, metrics::Started};
use crate::{gate::Gate, tasks::AbortOnDrop, workqueue};

/// Why a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Something changed (the notify, a stream, a deadline).
    Changed,
    /// The timer the last pass set ran out (the period, a requeue or a retry).
    Timer,
}

impl Wake {
    /// A bounded label for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Wake::Changed => "changed",
            Wake::Timer => "timer",
        }
    }
}

/// How a pass that asked to back off is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// 1 s after the first failure in a row, doubling up to 60 s (the work queue's backoff).
    Exponential,
    /// Always after this delay.
    Fixed(Duration),
}

/// Paces the passes of a level-triggered controller; see the module docs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::{sync::Arc, time::Duration};
/// use flotilla_multicluster::runner::{Action, PassRunner, Retry};
/// use tokio::sync::Notify;
///
/// let changed = Arc::new(Notify::new());
/// let mut runner = PassRunner::new("example", changed.clone())
///     .period(Duration::from_secs(300))
///     .retry(Retry::Fixed(Duration::from_secs(5)))
///     .debounce(Duration::from_millis(200));
/// changed.notify_one(); // e.g. from a watch
/// let mut passes = 0;
/// while let Some(wake) = runner.next().await {
///     passes += 1; // a pass over everything, knowing why it runs (`wake`)
///     runner.finish(Action::await_change());
///     if passes == 1 { break; }
/// }
/// # }
/// ```
pub struct PassRunner {
    name: String,
    wake: Arc<Notify>,
    period: Duration,
    retry: Retry,
    debounce: Duration,
    gate: Option<Gate>,
    metrics: Option<Arc<dyn RunMetrics>>,
    shutdown: CancellationToken,
    /// Forwarders of change streams into `wake`.
    tasks: AbortOnDrop,
    /// When the next pass is due without a change.
    due: Instant,
    failures: u32,
    /// When the pass handed out last started.
    started: Option<Instant>,
    /// Counts this runner as a started worker once past the gate.
    worker: Option<Started>,
}

/// The period when none is set: a pass an hour at least.
const DEFAULT_PERIOD: Duration = Duration::from_secs(3600);

impl PassRunner {
    /// A runner named `name` (logs, metrics) woken by `wake`: no debounce, an hourly
    /// period, exponential retries, no gate, no metrics, never shut down. The first pass
    /// waits for a wake-up or the period.
    pub fn new(name: impl Into<String>, wake: Arc<Notify>) -> Self {
        PassRunner {
            name: name.into(),
            wake,
            period: DEFAULT_PERIOD,
            retry: Retry::Exponential,
            debounce: Duration::ZERO,
            gate: None,
            metrics: None,
            shutdown: CancellationToken::new(),
            tasks: AbortOnDrop::default(),
            due: Instant::now() + DEFAULT_PERIOD,
            failures: 0,
            started: None,
            worker: None,
        }
    }

    /// A pass at least this often, changes or not (counted from the end of the last one).
    pub fn period(mut self, period: Duration) -> Self {
        self.period = period;
        self.due = Instant::now() + period;
        self
    }

    /// How a pass that returned [`Action::Backoff`] is retried.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// After a wake-up, wait this long before the pass; wake-ups meanwhile fold into it.
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// No pass before `gate` opens; none at all if it fails.
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Reports every pass to `metrics`.
    pub fn metrics(mut self, metrics: Arc<dyn RunMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// [`PassRunner::next`] returns `None` once `token` is cancelled.
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// Wakes the runner on every item of `stream` (kept for as long as the runner).
    pub fn wake_on<S>(mut self, stream: S) -> Self
    where
        S: Stream + Send + 'static,
    {
        let wake = self.wake.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {
                wake.notify_one();
            }
        }));
        self
    }

    /// Wakes the runner on every message of `rx` (the messages themselves are dropped).
    pub fn wake_on_channel<T: Send + 'static>(
        mut self,
        mut rx: mpsc::UnboundedReceiver<T>,
    ) -> Self {
        let wake = self.wake.clone();
        self.tasks.push(tokio::spawn(async move {
            while rx.recv().await.is_some() {
                wake.notify_one();
            }
        }));
        self
    }

    /// Wakes the runner on every change `changes` sees.
    pub fn wake_on_changes<T: Send + Sync + 'static>(
        mut self,
        mut changes: watch::Receiver<T>,
    ) -> Self {
        let wake = self.wake.clone();
        self.tasks.push(tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                wake.notify_one();
            }
        }));
        self
    }

    /// Wakes the runner once at `at` (e.g. when a start-up grace ends).
    pub fn wake_at(mut self, at: Instant) -> Self {
        let wake = self.wake.clone();
        self.tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            wake.notify_one();
        }));
        self
    }

    /// Waits for the next pass: a wake-up (then the debounce) or the timer, then the gate.
    /// `None` once shut down or when the gate failed. Call [`PassRunner::finish`] after
    /// the pass.
    pub async fn next(&mut self) -> Option<Wake> {
        let wake = tokio::select! {
            _ = self.wake.notified() => Wake::Changed,
            _ = tokio::time::sleep_until(self.due) => Wake::Timer,
            _ = self.shutdown.cancelled() => return None,
        };
        if !self.debounce.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(self.debounce) => {}
                _ = self.shutdown.cancelled() => return None,
            }
            // Wake-ups during the debounce are folded into this pass, which reads the
            // state after them.
            let _ = self.wake.notified().now_or_never();
        }
        if let Some(gate) = &self.gate {
            tokio::select! {
                open = gate.opened() => if !open { return None },
                _ = self.shutdown.cancelled() => return None,
            }
        }
        if self.worker.is_none() {
            self.worker = Some(Started::new(self.metrics.clone()));
        }
        debug!(runner = %self.name, wake = wake.as_str(), "pass");
        self.started = Some(Instant::now());
        Some(wake)
    }

    /// Ends the pass [`PassRunner::next`] handed out: `action` sets when the next one is
    /// due without a change ([`Action::AwaitChange`]: the period).
    pub fn finish(&mut self, action: Action) {
        let now = Instant::now();
        let wait = match action {
            Action::AwaitChange => {
                self.failures = 0;
                self.period
            }
            Action::Requeue(after) => {
                self.failures = 0;
                after
            }
            Action::Backoff { recheck } => {
                self.failures = self.failures.saturating_add(1);
                let retry = match self.retry {
                    Retry::Exponential => workqueue::backoff(self.failures),
                    Retry::Fixed(d) => d,
                };
                recheck.map_or(retry, |r| r.min(retry))
            }
        };
        self.due = now + wait;
        if let (Some(m), Some(started)) = (&self.metrics, self.started.take()) {
            m.reconciled(&Report {
                outcome: Outcome::of(action),
                action,
                took: now - started,
                queue_depth: 0,
            });
        }
    }
}
