//! Logging set-up of the binary: `tracing` to stderr, filtered by `RUST_LOG`, as text for
//! people or JSON for log collectors.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields included.
    Json,
}

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset or
/// invalid (e.g. `info` for the controller-manager, `warn` for one-shot commands).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber may already be installed (in tests); keeping it is fine.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
