//! The `flotilla` binary: parses the command line, sets up logging and signal handling,
//! and hands over to [`flotilla_cli`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use flotilla_cli::{self as cli, Cli, Command, Context};
use tokio::signal::unix::{SignalKind, signal};

/// The allocator of every command: the control plane allocates and frees a little for
/// every watch event, request and reconcile, and glibc's allocator spent about a quarter
/// of its CPU time doing so (docs/benchmark-log.md, "Flotilla's own CPU").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The controller-manager is a service: log what it does. One-shot commands print their
    // results; their logs are for trouble only.
    let (default_filter, otlp) = match &cli.command {
        Command::ControllerManager(args) => ("info", args.otlp_endpoint.clone()),
        _ => ("warn", None),
    };
    let traces = match cli::logging::init(cli.global.log_format, default_filter, otlp.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };

    let ctx = Context::stdout();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            _ => {
                tracing::warn!("cannot listen for SIGTERM/SIGINT; stop with SIGKILL");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("stopping (signal received; a second one exits at once)");
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Child processes (local clusters) die with us through their parent-death signal.
        std::process::exit(130);
    });

    let result = cli::execute(cli, ctx).await;
    if let Some(traces) = traces {
        // The exporter's shutdown blocks on its thread; the runtime's workers must not.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => match error.downcast_ref::<cli::Exit>() {
            Some(exit) => {
                if exit.is_reported() {
                    eprintln!("error: {exit}");
                }
                ExitCode::from(exit.code())
            }
            None => {
                eprintln!("error: {error:#}");
                ExitCode::FAILURE
            }
        },
    }
}
