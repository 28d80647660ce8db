//! Logging set-up of the binary: `tracing` to stderr, filtered by `RUST_LOG`, as text for
//! people or JSON for log collectors. Colours only when stderr is a terminal: a log file or
//! a collector would otherwise store the escape codes in every line.

use std::io::IsTerminal;

use tracing_subscriber::{
    EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _,
};

use crate::traces::Traces;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields included.
    Json,
}

/// Whether log lines carry ANSI colours: text on a terminal only, and never when the user
/// asked for none (`NO_COLOR`, any non-empty value, as no-color.org proposes).
pub fn colours(format: LogFormat, terminal: bool, no_color: Option<&str>) -> bool {
    format == LogFormat::Text && terminal && no_color.is_none_or(str::is_empty)
}

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset or
/// invalid (e.g. `info` for the controller-manager, `warn` for one-shot commands).
/// `otlp_endpoint`: where spans are also exported (see [`crate::traces`]); the exporter
/// is returned, to be shut down before exiting.
pub fn init(
    format: LogFormat,
    default_filter: &str,
    otlp_endpoint: Option<&str>,
) -> anyhow::Result<Option<Traces>> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let no_color = std::env::var("NO_COLOR").ok();
    let ansi = colours(format, std::io::stderr().is_terminal(), no_color.as_deref());
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines.json().flatten_event(true).boxed(),
    };
    let (traces, exporting) = match otlp_endpoint.filter(|e| !e.is_empty()) {
        Some(endpoint) => {
            let (traces, layer) = Traces::start(endpoint)?;
            flotilla_controllers::sync::export_host_events();
            (Some(traces), Some(layer))
        }
        None => (None, None),
    };
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(exporting)
        .with(lines);
    // A subscriber may already be installed (in tests); keeping it is fine.
    let _ = subscriber.try_init();
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_coloured_only_on_a_terminal() {
        assert!(colours(LogFormat::Text, true, None));
        assert!(!colours(LogFormat::Text, false, None));
    }

    #[test]
    fn json_and_no_color_are_never_coloured() {
        assert!(!colours(LogFormat::Json, true, None));
        assert!(!colours(LogFormat::Text, true, Some("1")));
        assert!(colours(LogFormat::Text, true, Some("")));
    }
}
