//! The runtimes every controller runs on: a [`KeyedRunner`] for controllers that reconcile
//! one key at a time (from a [`crate::workqueue::WorkQueue`]), a [`PassRunner`] for
//! level-triggered controllers that look at everything in one pass. Both speak one
//! [`Action`] (done, requeue after, back off with an optional earlier recheck), report to
//! one [`RunMetrics`] hook (and a keyed runner's queue age, read at each scrape by
//! [`QueueAges`]), start behind a [`crate::gate::Gate`] and stop on a
//! `CancellationToken`. [`crate::Controller`] runs its workers the same way.
//!
//! A runner decides when to run, never what a key or a pass does.

mod action;
mod ages;
mod keyed;
mod metrics;
mod pass;

pub use action::{Action, Outcome, Reconciled};
pub use ages::{QUEUE_OLDEST_AGE, QueueAges, Watched};
pub use keyed::KeyedRunner;
pub use metrics::{Named, Report, RunMetrics};
pub use pass::{PassRunner, Retry, Wake};

#[cfg(test)]
mod tests;
