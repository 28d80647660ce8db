//! `flotilla dashboard`: serves the live web dashboard ([`flotilla_dashboard`]) for the host
//! of the kubeconfig context, until Ctrl-C. Read-only: it lists and watches, nothing else.

use std::net::SocketAddr;

use anyhow::Context as _;

use super::{Context, GlobalArgs, access};
use flotilla_dashboard as dashboard;

/// Examples of `flotilla dashboard --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Serve on http://127.0.0.1:8090/ for the current context's host
  flotilla dashboard

  # Another host context, another port
  flotilla dashboard --context host --address 127.0.0.1:9000

  # Reachable from elsewhere: each request needs a bearer token of the host cluster
  # (checked with a TokenReview; pages show what the caller's RBAC lets it read)
  flotilla dashboard --address 0.0.0.0:8090
  curl -H \"Authorization: Bearer $(kubectl create token viewer)\" http://HOST:8090/api/overview

Needs read access (list/watch) to the federation's resources and Events, and on a
non-loopback address also create on tokenreviews and subjectaccessreviews. On loopback it
is open (only this machine reaches it); --insecure-no-auth serves a non-loopback address
without authentication.";

/// Arguments of `flotilla dashboard`.
#[derive(Debug, Clone, clap::Args)]
pub struct DashboardArgs {
    /// Address to serve on.
    #[arg(long, default_value = dashboard::DEFAULT_ADDRESS, value_name = "ADDR")]
    pub address: SocketAddr,
    /// On a non-loopback address, serve without authentication (anyone who reaches it sees
    /// everything the dashboard's own credentials can read).
    #[arg(long)]
    pub insecure_no_auth: bool,
}

/// Runs `flotilla dashboard` until `ctx.shutdown` fires.
pub async fn run(global: &GlobalArgs, args: DashboardArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = access::host(global).await?.client()?;
    let addr = dashboard::start(
        host,
        &global.kubefed_namespace,
        args.address,
        args.insecure_no_auth,
        ctx.shutdown.clone(),
    )
    .await
    .with_context(|| format!("listening on {}", args.address))?;
    ctx.out
        .line(format!("Flotilla dashboard: {}", dashboard::url(addr)));
    ctx.out.line("Press Ctrl-C to stop.");
    ctx.shutdown.cancelled().await;
    Ok(())
}
