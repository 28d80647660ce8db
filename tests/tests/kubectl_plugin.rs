//! `kubectl flotilla`: the `flotilla` binary under the name kubectl-flotilla on PATH is found
//! by kubectl and behaves as `flotilla`; the krew manifest (config/krew/) renders for a real
//! archive holding it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, ensure};
use flotilla_tests::flotilla_binary;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh directory holding `kubectl-flotilla`, a symbolic link to the built binary.
fn plugin_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("flotilla-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::os::unix::fs::symlink(flotilla_binary()?, dir.join("kubectl-flotilla"))?;
    Ok(dir)
}

/// Runs `program args` with `dir` first on PATH.
fn run(dir: &Path, program: &str, args: &[&str]) -> anyhow::Result<Output> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    Command::new(program)
        .args(args)
        .env("PATH", std::env::join_paths(paths)?)
        .output()
        .with_context(|| format!("running {program}"))
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn have_kubectl() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: kubectl is not installed");
    }
    found
}

#[test]
fn kubectl_finds_the_plugin_and_kubectl_flotilla_version_prints_flotillas_version()
-> anyhow::Result<()> {
    if !have_kubectl() {
        return Ok(());
    }
    let dir = plugin_dir("plugin")?;
    let list = run(&dir, "kubectl", &["plugin", "list"])?;
    ensure!(
        text(&list).contains(&dir.join("kubectl-flotilla").display().to_string()),
        "kubectl plugin list:\n{}",
        text(&list)
    );
    let direct = Command::new(flotilla_binary()?).arg("version").output()?;
    let plugin = run(&dir, "kubectl", &["flotilla", "version"])?;
    ensure!(plugin.status.success(), "{}", text(&plugin));
    ensure!(
        plugin.stdout == direct.stdout && !direct.stdout.is_empty(),
        "kubectl flotilla version: {:?}, flotilla version: {:?}",
        text(&plugin),
        text(&direct)
    );
    // Flags after the plugin name reach it: kubectl does not take --context for itself.
    let help = run(&dir, "kubectl", &["flotilla", "status", "--help"])?;
    ensure!(help.status.success(), "{}", text(&help));
    ensure!(
        text(&help).contains("Usage: kubectl-flotilla status"),
        "{}",
        text(&help)
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn the_krew_manifest_renders_for_an_archive_holding_kubectl_flotilla() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("flotilla-krew-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(flotilla_binary()?, dir.join("kubectl-flotilla"))?;
    let archive = dir.join("kubectl-flotilla.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&dir)
        .arg("kubectl-flotilla")
        .output()?;
    ensure!(tar.status.success(), "{}", text(&tar));
    let render = Command::new("bash")
        .arg(repo().join("config/krew/render.sh"))
        .args(["0.1.0", "file:///releases/kubectl-flotilla.tar.gz"])
        .arg(&archive)
        .output()?;
    ensure!(render.status.success(), "{}", text(&render));
    let manifest: Value = serde_saphyr::from_str(&String::from_utf8(render.stdout)?)?;
    let sum = Command::new("sha256sum").arg(&archive).output()?;
    let sum = String::from_utf8(sum.stdout)?;
    let platform = &manifest["spec"]["platforms"][0];
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "flotilla");
    assert_eq!(manifest["spec"]["version"], "v0.1.0");
    assert_eq!(platform["bin"], "kubectl-flotilla");
    assert_eq!(platform["uri"], "file:///releases/kubectl-flotilla.tar.gz");
    assert_eq!(
        platform["sha256"].as_str(),
        sum.split_whitespace().next(),
        "the manifest's checksum is the archive's"
    );
    // An archive without the binary at its top level is refused.
    let wrong = dir.join("wrong.tar.gz");
    Command::new("tar")
        .arg("-czf")
        .arg(&wrong)
        .arg("-C")
        .arg(repo())
        .arg("README.md")
        .output()?;
    let refused = Command::new("bash")
        .arg(repo().join("config/krew/render.sh"))
        .args(["0.1.0", "file:///x"])
        .arg(&wrong)
        .output()?;
    assert!(!refused.status.success());
    assert!(text(&refused).contains("has no kubectl-flotilla"));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
