//! The runtimes every controller runs on: a [`KeyedRunner`] for controllers that reconcile
//! one key at a time (from a [`crate::workqueue::WorkQueue`]), a [`PassRunner`] for
//! level-triggered controllers that look at everything in one pass. Both speak one
//! [`Action`] (done, requeue after, back off with an optional earlier recheck), report to
//! one [`RunMetrics`] hook, start behind a [`crate::gate::Gate`] and stop on a
//! `CancellationToken`. [`crate::Controller`] runs its workers the same way.
//!
//! A runner decides when to run, never what a key or a pass does.

mod action;
mod keyed;
mod metrics;
mod pass;

pub use action::{Action, Outcome, Reconciled};
pub use keyed::KeyedRunner;
pub use metrics::{Named, Report, RunMetrics};
pub use pass::{PassRunner, Retry, Wake};

#[cfg(test)]
mod tests;
