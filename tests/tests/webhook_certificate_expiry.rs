//! The admission webhook's certificate expiry on a real `flotilla controller-manager`'s
//! `/metrics`: `flotilla_webhook_certificate_expiry_timestamp_seconds` equals the `notAfter`
//! of the certificate the process actually serves on its webhook port, as `openssl`
//! reads it over a TLS handshake, and follows the certificate when it is renewed.

use std::{process::Stdio, time::Duration};

use anyhow::{Context as _, bail};
use flotilla_tests::{federation::federation, flotilla_binary, init_tracing, pod::free_port};
use tokio::time::Instant;

const SERIES: &str = "flotilla_webhook_certificate_expiry_timestamp_seconds";

/// The process's `/metrics` value of [`SERIES`], read with curl; `None` before it answers.
async fn exported(metrics_port: u16) -> anyhow::Result<Option<i64>> {
    let out = tokio::process::Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{metrics_port}/metrics")])
        .output()
        .await
        .context("running curl")?;
    if !out.status.success() {
        return Ok(None);
    }
    let page = String::from_utf8(out.stdout)?;
    let value = page
        .lines()
        .find_map(|l| l.strip_prefix(SERIES)?.strip_prefix(' '))
        .map(|v| v.trim().parse::<i64>())
        .transpose()
        .with_context(|| format!("{SERIES} in:\n{page}"))?;
    Ok(value)
}

/// The `notAfter` (Unix seconds) of the certificate served on `port`, as `openssl s_client`
/// receives it and `openssl x509` and GNU `date` read it; `None` before the port answers.
async fn served_not_after(port: u16) -> anyhow::Result<Option<i64>> {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null \
         | openssl x509 -noout -enddate | sed 's/^notAfter=//' \
         | xargs -I{{}} date -u -d {{}} +%s"
    );
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .await
        .context("running openssl")?;
    let text = String::from_utf8(out.stdout)?;
    Ok(text.trim().parse().ok())
}

/// Waits until the served certificate's end and the exported value agree, the served
/// one after `after` (a renewal, when given); returns it.
async fn agreed(webhook_port: u16, metrics_port: u16, after: i64) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = (None, None);
    while Instant::now() < deadline {
        let served = served_not_after(webhook_port).await?;
        let metric = exported(metrics_port).await?;
        if let (Some(s), Some(m)) = (served, metric)
            && s == m
            && s > after
        {
            return Ok(s);
        }
        last = (served, metric);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!("served notAfter and {SERIES} never agreed past {after}: last {last:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_manager_exports_the_served_webhook_certificates_expiry_and_follows_its_renewal()
-> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation(1).await?;
    // The process below is the only control plane.
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let (webhook_port, metrics_port) = (free_port()?, free_port()?);
    crate::service_account_import_webhook::configuration(&fed.host, &[webhook_port]).await?;
    let log = std::fs::File::create(fed.env.dir().join("controller-manager.log"))?;
    let mut child = tokio::process::Command::new(flotilla_binary()?)
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args([
            "--context",
            "host",
            "controller-manager",
            "--leader-elect=false",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .args(["--webhook-addr", &format!("127.0.0.1:{webhook_port}")])
        .args(["--webhook-cert-names", "127.0.0.1"])
        .args([
            "--webhook-configuration",
            crate::service_account_import_webhook::CONFIGURATION,
        ])
        // Renewed at 2/3 of 12 s, looked at every second (a fifth of the overlap).
        .args([
            "--webhook-cert-lifetime",
            "12s",
            "--webhook-ca-lifetime",
            "60s",
        ])
        .args(["--webhook-rotation-overlap", "5s"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting the controller-manager")?;

    let first = agreed(webhook_port, metrics_port, 0).await?;
    let now = i64::try_from(std::time::SystemTime::UNIX_EPOCH.elapsed()?.as_secs())?;
    assert!(
        first > now && first <= now + 13,
        "a certificate of 12 s ends within 12 s: {first} against now {now}"
    );
    let renewed = agreed(webhook_port, metrics_port, first).await?;
    assert!(renewed > first);
    child.kill().await?;
    Ok(())
}
