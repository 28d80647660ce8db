//! Scenarios that share one federation: the clusters and the control plane are started
//! once, each scenario gets a namespace of its own (federated to every member before it
//! starts), and all of them run at once, each to its end. A scenario that fails or panics
//! does not stop the others; the test then fails naming every scenario that did, with its
//! error. Only scenarios that do not disturb each other belong together: nothing that
//! stops a cluster or the control plane, changes the federation's configuration under the
//! others' feet or asserts on counters the others also move.
//!
//! ```no_run
//! # use flotilla_tests::{federation::Federation, scenario, scenarios::run_all};
//! async fn configmaps_propagate(fed: &Federation, ns: &str) -> anyhow::Result<()> {
//!     # let _ = (fed, ns);
//!     Ok(())
//! }
//! # async fn demo() -> anyhow::Result<()> {
//! let fed = flotilla_tests::federation::federation(2).await?;
//! run_all(&fed, vec![scenario!(&fed, "cm", configmaps_propagate)]).await;
//! # Ok(())
//! # }
//! ```

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    time::{Duration, Instant},
};

use futures::FutureExt as _;

use crate::{
    federation::{Federation, federated_namespace},
    wait::wait_namespace_in,
};

/// The body of one scenario, borrowing the shared federation.
pub type Body<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

/// One scenario: its name (the test function it was), its namespace (if it has one) and
/// its body.
pub struct Scenario<'a> {
    name: &'static str,
    namespace: Option<&'static str>,
    body: Body<'a>,
}

impl<'a> Scenario<'a> {
    /// A scenario named `name` running `body` in `namespace`.
    pub fn new(name: &'static str, namespace: &'static str, body: Body<'a>) -> Self {
        Scenario {
            name,
            namespace: Some(namespace),
            body,
        }
    }

    /// A scenario named `name` running `body`, without a namespace of its own.
    pub fn without_namespace(name: &'static str, body: Body<'a>) -> Self {
        Scenario {
            name,
            namespace: None,
            body,
        }
    }
}

/// `scenario!(fed, "ns", function)`: a [`Scenario`] named after `function`, which is called
/// as `function(fed, "ns")` once its namespace is federated. `scenario!(fed, NS => function)`:
/// the same for a function that knows its namespace, called as `function(fed)`.
/// `scenario!(function(args...))`: one without a namespace, called as `function(args...)`.
#[macro_export]
macro_rules! scenario {
    ($fed:expr, $ns:literal, $function:path) => {
        $crate::scenarios::Scenario::new(
            stringify!($function),
            $ns,
            Box::pin($function($fed, $ns)),
        )
    };
    ($fed:expr, $ns:expr => $function:path) => {
        $crate::scenarios::Scenario::new(stringify!($function), $ns, Box::pin($function($fed)))
    };
    ($function:ident ( $($arg:expr),* $(,)? )) => {
        $crate::scenarios::Scenario::without_namespace(
            stringify!($function),
            Box::pin($function($($arg),*)),
        )
    };
}

/// How one scenario ended.
struct Outcome {
    name: &'static str,
    took: Duration,
    error: Option<String>,
}

/// Federates every scenario's namespace, then runs them as [`run_concurrently`] does.
///
/// # Panics
/// When a namespace cannot be federated, or when any scenario failed or panicked; the
/// message names each failed scenario with its error.
pub async fn run_all(fed: &Federation, scenarios: Vec<Scenario<'_>>) {
    let namespaces = scenarios.iter().map(|s| async move {
        let Some(ns) = s.namespace else { return };
        if let Err(e) = federate_namespace(fed, ns).await {
            panic!("scenario {}: namespace {ns}: {e:#}", s.name);
        }
    });
    futures::future::join_all(namespaces).await;
    run_concurrently(scenarios).await;
}

/// Runs all scenarios at once and waits for each; prints how each ended and how long it
/// took.
///
/// # Panics
/// When any scenario failed or panicked; the message names each failed scenario with its
/// error.
pub async fn run_concurrently(scenarios: Vec<Scenario<'_>>) {
    let outcomes = futures::future::join_all(scenarios.into_iter().map(run_one)).await;
    let mut failed = Vec::new();
    for o in &outcomes {
        match &o.error {
            None => eprintln!("scenario {} passed in {:.1?}", o.name, o.took),
            Some(e) => {
                eprintln!("scenario {} FAILED after {:.1?}: {e}", o.name, o.took);
                failed.push(format!("scenario {}: {e}", o.name));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failed.len(),
        outcomes.len(),
        failed.join("\n")
    );
}

async fn federate_namespace(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    federated_namespace(fed, ns).await?;
    wait_namespace_in(&fed.members, ns).await
}

async fn run_one(scenario: Scenario<'_>) -> Outcome {
    let started = Instant::now();
    let error = match AssertUnwindSafe(scenario.body).catch_unwind().await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{e:#}")),
        Err(panic) => Some(format!("panicked: {}", panic_message(panic.as_ref()))),
    };
    Outcome {
        name: scenario.name,
        took: started.elapsed(),
        error,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(not a string)")
}
