//! `kubectl` as a user types it, against a test federation's host.

use std::process::{Command, Stdio};

use anyhow::{Context as _, ensure};

use crate::federation::Federation;

/// `kubectl ARGS` against the host (context `host` of the federation's kubeconfig), `input`
/// on its standard input; its output, or an error with what it printed.
pub fn host(fed: &Federation, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    if let Some(text) = input {
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
