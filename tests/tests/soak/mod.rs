//! The chaos soak's parts (`chaos.rs` drives them): the federation ([`setup`]), the
//! workload ([`workload`]), the faults ([`faults`]) and the invariants ([`checks`],
//! [`mcs`], and `fault_harness::violations` for the federated ConfigMaps).
//!
//! Not a test target of its own (it lives in a directory); `chaos.rs` and
//! `rollout_revert.rs` include it.

#![allow(dead_code)] // each including test file uses a different part of it

pub mod checks;
pub mod faults;
pub mod mcs;
pub mod setup;
pub mod workload;

use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use setup::{NS, Soak};

/// How often a convergence wait prints what it still waits for.
const PROGRESS: Duration = Duration::from_secs(30);

/// Clients the checks need, cloned out of the [`Soak`] so checking borrows nothing.
#[derive(Clone)]
pub struct Checker {
    host: Client,
    members: Vec<(String, Client)>,
    push: Vec<(String, Client)>,
    pull: Client,
}

impl Checker {
    /// The checker of `soak`.
    pub fn new(soak: &Soak) -> Checker {
        Checker {
            host: soak.fed.host.clone(),
            members: soak.member_clients(),
            push: soak.push_clients(),
            pull: soak.pull_client(),
        }
    }

    /// Every violation of every invariant, by area, as readable lines (empty: converged).
    pub async fn violations(&self) -> anyhow::Result<Vec<String>> {
        let mut found = Vec::new();
        let configmaps = crate::fault_harness::violations(&self.host, &self.members, NS).await?;
        found.extend(configmaps.into_iter().map(|v| format!("configmap {v}")));
        let rollouts = checks::rollouts(&self.host, &self.members).await?;
        found.extend(rollouts.into_iter().map(|v| format!("rollout {v}")));
        let works = checks::works(&self.host, &self.pull).await?;
        found.extend(works.into_iter().map(|v| format!("pull {v}")));
        let mcs = mcs::violations(&self.host, &self.push).await?;
        found.extend(mcs.into_iter().map(|v| format!("mcs {v}")));
        let imports = checks::imports(&self.host).await?;
        found.extend(imports.into_iter().map(|v| format!("sa-import {v}")));
        let nodes = checks::nodes(&self.members).await?;
        found.extend(nodes.into_iter().map(|v| format!("node {v}")));
        Ok(found)
    }

    /// Waits until [`Checker::violations`] finds nothing; returns how long it took, or
    /// after `timeout` the last violations found.
    pub async fn wait_converged(&self, timeout: Duration) -> Result<Duration, Vec<String>> {
        let started = Instant::now();
        let mut last = Vec::new();
        let mut shown = Instant::now();
        while started.elapsed() < timeout {
            if shown.elapsed() >= PROGRESS && !last.is_empty() {
                shown = Instant::now();
                let first: Vec<_> = last.iter().take(5).collect();
                println!(
                    "  {:>7.1} s  not converged: {} violations, e.g. {first:?}",
                    started.elapsed().as_secs_f64(),
                    last.len()
                );
            }
            let check = tokio::time::timeout(Duration::from_secs(20), self.violations());
            match check.await {
                Ok(Ok(found)) if found.is_empty() => return Ok(started.elapsed()),
                Ok(Ok(found)) => last = found,
                Ok(Err(e)) => last = vec![format!("checking failed: {e:#}")],
                Err(_) => last = vec!["checking timed out".to_owned()],
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }
}
