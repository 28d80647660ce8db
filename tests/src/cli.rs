//! Running `flotilla` commands in-process as the binary runs them, against a test
//! federation: one-shot commands with their output and exit status, and the dashboard on a
//! free port.

use std::time::Duration;

use anyhow::ensure;
use flotilla_controllers::cli::{self, Context, Exit};

use crate::{federation::Federation, wait_for};

/// What one command gave: its exit status (as the binary would exit) and its output, with
/// the error of a failed run appended.
pub struct Run {
    /// 0, or [`Exit::code`] of the error (99 for any other error).
    pub code: u8,
    /// Standard output, then `[error: …]` when the command failed with a status other
    /// than 1 (`diff`'s "there are differences").
    pub out: String,
}

/// Runs `flotilla --kubeconfig … --context host ARGS`.
pub async fn run(fed: &Federation, args: &[&str]) -> Run {
    let mut full: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        fed.env.kubeconfig_path().display().to_string(),
        "--context".into(),
        "host".into(),
    ];
    full.extend(args.iter().map(|a| a.to_string()));
    let ctx = Context::captured();
    let result = cli::run(full, ctx.clone()).await;
    let code = match &result {
        Ok(()) => 0,
        Err(e) => e.downcast_ref::<Exit>().map_or(99, Exit::code),
    };
    let mut out = ctx.out.text();
    if let Err(e) = result
        && code != 1
    {
        out.push_str(&format!("[error: {e:#}]"));
    }
    Run { code, out }
}

/// Runs `flotilla dashboard` in-process on a free loopback port until `ctx.shutdown` is
/// cancelled; returns its URL once it is printed.
pub async fn start_dashboard(fed: &Federation, ctx: &Context) -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let args: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        fed.env.kubeconfig_path().display().to_string(),
        "--context".into(),
        "host".into(),
        "dashboard".into(),
        "--address".into(),
        format!("127.0.0.1:{port}"),
    ];
    let run_ctx = ctx.clone();
    tokio::spawn(async move {
        if let Err(e) = cli::run(args, run_ctx).await {
            panic!("flotilla dashboard failed: {e:#}");
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    wait_for(
        Duration::from_secs(30),
        "the dashboard's URL to be printed",
        || async {
            ensure!(ctx.out.text().contains(&url), "printed: {}", ctx.out.text());
            Ok(())
        },
    )
    .await?;
    Ok(url)
}
