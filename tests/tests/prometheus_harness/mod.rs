//! A real `prometheus` process for the observability tests (`alerts.rs`): started in a
//! temporary directory on a loopback port, scraping given targets every second, evaluating
//! given rules every second; queried through its HTTP API. Also where the shipped rules,
//! their promtool tests and the Grafana dashboard are read from.
//!
//! Not a test target of its own (it lives in a directory); a test file includes it.

#![allow(dead_code)] // each including test file uses a different part of it

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_tests::{cli::get_as, wait_for};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The repository's root (this crate is `tests/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `config/prometheus/flotilla-rules.yaml`, parsed.
pub fn shipped_rules() -> anyhow::Result<Value> {
    read_yaml(&repo().join("config/prometheus/flotilla-rules.yaml"))
}

/// A YAML file as JSON values.
pub fn read_yaml(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every rule of a rules file (`groups[].rules[]`).
pub fn rules(file: &Value) -> Vec<&Value> {
    let groups = file["groups"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]))
        .collect()
}

/// Whether `promtool` (Debian's `prometheus` package) is on PATH; says why a test skips.
pub fn have(tool: &str) -> bool {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!(
            "SKIPPED: `{tool}` is not installed (Debian package `prometheus`; scripts/test.sh installs it)"
        );
    }
    found
}

/// A loopback port free right now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running Prometheus; killed when dropped.
pub struct Prometheus {
    child: Child,
    /// Where its HTTP API answers.
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus in `dir`, scraping `targets` (job `flotilla`) and evaluating
    /// `rules` (a rules file's content) every second; waits until it is ready.
    pub async fn start(dir: &Path, targets: &[SocketAddr], rules: &Value) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let rules_path = dir.join("rules.yaml");
        // JSON is YAML: the rules are written as they were read.
        std::fs::write(&rules_path, serde_json::to_string_pretty(rules)?)?;
        let targets: Vec<String> = targets.iter().map(ToString::to_string).collect();
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [rules_path],
            "scrape_configs": [{"job_name": "flotilla", "static_configs": [{"targets": targets}]}],
        });
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting prometheus")?;
        let prometheus = Prometheus { child, addr, log };
        wait_for(
            Duration::from_secs(60),
            "prometheus to be ready",
            || async {
                let (status, _, body) = get_as(addr, "/-/ready", None).await?;
                ensure!(status == 200, "{status}: {body}");
                Ok(())
            },
        )
        .await
        .with_context(|| prometheus.log_text())?;
        Ok(prometheus)
    }

    /// Prometheus's own log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn api(&self, path: &str) -> anyhow::Result<Value> {
        let (status, _, body) = get_as(self.addr, path, None).await?;
        let answer: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        ensure!(
            status == 200 && answer["status"] == "success",
            "{path}: {status} {body}"
        );
        Ok(answer["data"].clone())
    }

    /// The instant vector `expr` evaluates to now (`data.result`).
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(expr)))
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The alerts pending or firing now (`/api/v1/alerts`).
    pub async fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// Every metric name Prometheus holds (scraped and recorded).
    pub async fn names(&self) -> anyhow::Result<Vec<String>> {
        let data = self.api("/api/v1/label/__name__/values").await?;
        Ok(serde_json::from_value(data)?)
    }

    /// Stops it.
    pub async fn stop(mut self) {
        self.child.kill().await.ok();
    }
}

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The `state` (`pending`, `firing`) of alert `name` whose label `key` is `value`.
pub fn alert_state(alerts: &[Value], name: &str, key: &str, value: &str) -> Option<String> {
    alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == name && a["labels"][key] == value)
        .and_then(|a| a["state"].as_str())
        .map(str::to_owned)
}
