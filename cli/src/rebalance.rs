//! `flotilla rebalance TYPE NAME`: a one-off rebalance of a workload whose replicas a
//! ReplicaSchedulingPreference divides (Flotilla's answer to Karmada's
//! WorkloadRebalancer). The command checks the target's rollout first (the same gate as
//! the controller, [`flotilla_core::rebalance::rollout_gate`]), asks with the
//! `scheduling.flotilla.io/rebalance` annotation, and waits for the scheduler's answer in
//! the RSP's `status.rebalance`. The scheduler does the work; this only asks and reports.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{
    ReplicaSchedulingPreference,
    federated::FederatedStatus,
    scheduling::{REBALANCE_ANNOTATION, RebalanceOutcome},
};
use flotilla_core::rebalance::rollout_gate;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{Context, GlobalArgs, access, parse_duration, resolve, status_capacity};

/// Examples of `flotilla rebalance --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Divide web's replicas again from the members' current capacity (its RSP is web too)
  flotilla rebalance deployment web -n demo
  flotilla rebalance rsp web -n demo

  # Ask and return at once; the answer is in the RSP's status.rebalance
  flotilla rebalance rsp web -n demo --no-wait";

/// How often the command looks for the answer.
const POLL: Duration = Duration::from_millis(500);

/// Arguments of `flotilla rebalance`.
#[derive(Debug, Clone, clap::Args)]
pub struct RebalanceArgs {
    /// `rsp`, or the workload's type in any spelling (`deployment`, `federateddeployment`,
    /// `replicaset`): the ReplicaSchedulingPreference of the same namespace and name.
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// The name of the workload (and of its RSP).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Do not wait for the scheduler's answer.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the answer.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// Runs `flotilla rebalance`.
pub async fn run(global: &GlobalArgs, args: RebalanceArgs, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ns = access::namespace(global, &access);
    if !status_capacity::is_rsp(&args.type_name) {
        let ftc = resolve::ftc_for(&host, &global.kubefed_namespace, &args.type_name).await?;
        let kind = &ftc.spec.federated_type.kind;
        anyhow::ensure!(
            matches!(kind.as_str(), "FederatedDeployment" | "FederatedReplicaSet"),
            "{kind} has no replicas to divide: rebalance works on Deployments and ReplicaSets"
        );
    }
    let rsps: Api<ReplicaSchedulingPreference> = Api::namespaced(host.clone(), &ns);
    let rsp = rsps.get_opt(&args.name).await?.with_context(|| {
        format!(
            "no ReplicaSchedulingPreference {ns}/{} divides this workload's replicas: nothing to rebalance",
            args.name
        )
    })?;
    check_rollout(&host, global, &ns, &rsp).await?;
    let token = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {REBALANCE_ANNOTATION: token}}});
    rsps.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("asking {ns}/{} to rebalance", args.name))?;
    if args.no_wait {
        ctx.out.write(format!(
            "rebalance of {ns}/{} asked ({REBALANCE_ANNOTATION}={token})\n",
            args.name
        ));
        return Ok(());
    }
    let answered = wait_answer(&rsps, &args, &token, ctx).await?;
    let answer = answered
        .status
        .as_ref()
        .and_then(|s| s.rebalance.clone())
        .context("the answer vanished")?;
    ctx.out.write(format!(
        "{}: {}\n{}",
        answer.outcome.as_str(),
        answer.message,
        status_capacity::rsp_table(std::slice::from_ref(&answered))
    ));
    match answer.outcome {
        RebalanceOutcome::Rebalanced => Ok(()),
        RebalanceOutcome::Refused => anyhow::bail!("rebalance refused: {}", answer.message),
    }
}

/// Refuses early when the RSP's target is in a rollout that is not complete.
async fn check_rollout(
    host: &Client,
    global: &GlobalArgs,
    ns: &str,
    rsp: &ReplicaSchedulingPreference,
) -> anyhow::Result<()> {
    let kind = &rsp.spec.target_kind;
    let ftc = resolve::ftc_for(host, &global.kubefed_namespace, kind).await?;
    let api = resolve::federated_api(host, &ftc.spec.federated_type, ns);
    let name = kube::ResourceExt::name_any(rsp);
    let target = api
        .get_opt(&name)
        .await?
        .with_context(|| format!("the RSP's target {kind} {ns}/{name} does not exist"))?;
    rollout_gate(&FederatedStatus::from_dynamic(&target))
        .map_err(|why| anyhow::anyhow!("rebalance refused: {why}"))
}

/// Polls the RSP until its status answers `token`.
async fn wait_answer(
    rsps: &Api<ReplicaSchedulingPreference>,
    args: &RebalanceArgs,
    token: &str,
    ctx: &Context,
) -> anyhow::Result<ReplicaSchedulingPreference> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let rsp = rsps.get(&args.name).await?;
        let answered = rsp
            .status
            .as_ref()
            .and_then(|s| s.rebalance.as_ref())
            .is_some_and(|r| r.request == token);
        if answered {
            return Ok(rsp);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no answer within {:?}: is the controller-manager running? (the request stays; \
             the scheduler answers it when it runs)",
            args.timeout
        );
        tokio::select! {
            _ = ctx.shutdown.cancelled() => anyhow::bail!("interrupted while waiting for the answer"),
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}
