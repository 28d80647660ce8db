//! `flotilla dashboard`: serves the live web dashboard ([`crate::dashboard`]) for the host
//! of the kubeconfig context, until Ctrl-C. Read-only: it lists and watches, nothing else.

use std::net::SocketAddr;

use anyhow::Context as _;

use super::{Context, GlobalArgs, access};
use crate::dashboard;

/// Examples of `flotilla dashboard --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Serve on http://127.0.0.1:8090/ for the current context's host
  flotilla dashboard

  # Another host context, another port
  flotilla dashboard --context host --address 127.0.0.1:9000

Needs only read access (list/watch) to the federation's resources and Events; serves on
loopback unless --address says otherwise (there is no authentication: bind elsewhere only
behind something that authenticates).";

/// Arguments of `flotilla dashboard`.
#[derive(Debug, Clone, clap::Args)]
pub struct DashboardArgs {
    /// Address to serve on.
    #[arg(long, default_value = dashboard::DEFAULT_ADDRESS, value_name = "ADDR")]
    pub address: SocketAddr,
}

/// Runs `flotilla dashboard` until `ctx.shutdown` fires.
pub async fn run(global: &GlobalArgs, args: DashboardArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = access::host(global).await?.client()?;
    let addr = dashboard::start(
        host,
        &global.kubefed_namespace,
        args.address,
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
