//! No Secret value anywhere a person reads, on real clusters: a FederatedSecret with
//! distinctive values (in `stringData`, in `data`, in an override into `stringData`, in an
//! override that fails) is propagated, then every surface is searched for those values —
//! the dashboard's pages and JSON (over HTTP, as the CLI serves them), `flotilla status` (table
//! and YAML), `flotilla diff` of a change, the Events in the namespace and every log line
//! the control plane wrote (captured at debug level). Each value is searched for as written
//! and base64-encoded (as the members store it). The one place a value may appear is
//! `flotilla diff --show-secrets`, and the test checks that it does there, so the search
//! is known to find a value that is present.
//!
//! The same search covers the credentials the control plane and its servers hold: the
//! webhook's private keys (its CA's and its serving certificate's, from the Secret it
//! generates), the bearer tokens callers show the dashboard (on a non-loopback address,
//! where it reviews them: an administrator's, a ServiceAccount's it forbids, and a made-up
//! one), and the members' rotating tokens in the host Secrets — none in a page, an answer,
//! `status`, a KubeFedCluster status, an Event in any namespace or a log line.

use std::{
    io::Write,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_cli::Context;
use flotilla_controllers::http_server as http;
use flotilla_tests::{
    cli::{get_as, run, service_account_token, start_dashboard, start_dashboard_on},
    federation::Federation,
    objects::FederatedObject,
    setup::federation_with_namespace,
    wait_for,
};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::{Api, api::ListParams};
use serde_json::{Value, json};
use tracing_subscriber::fmt::MakeWriter;

const NS: &str = "redact";
/// How long a change may take to reach the dashboard or the members.
const SEEN: Duration = Duration::from_secs(60);

/// The distinctive values, one per place a value can come from.
const IN_STRING_DATA: &str = "flotilla-e2e-stringdata-7f3a9c";
const IN_DATA: &str = "flotilla-e2e-data-2b8d41";
const IN_OVERRIDE: &str = "flotilla-e2e-override-5e6f10";
const IN_FAILING_OVERRIDE: &str = "flotilla-e2e-failing-c4d2e8";
const IN_CHANGE: &str = "flotilla-e2e-change-91ab3f";
const ALL: [&str; 5] = [
    IN_STRING_DATA,
    IN_DATA,
    IN_OVERRIDE,
    IN_FAILING_OVERRIDE,
    IN_CHANGE,
];

fn b64(value: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(value)
}

/// Every spelling of `value` that would betray it: as written and base64-encoded.
fn spellings(value: &str) -> [String; 2] {
    [value.to_owned(), b64(value)]
}

/// The credentials searched for besides the values ([`credentials`]): set once they are known.
static CREDENTIALS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Fails naming the surface when any value or credential shows in `text` (a credential
/// named, not printed).
fn no_value_in(surface: &str, text: &str) -> anyhow::Result<()> {
    for value in ALL {
        for spelling in spellings(value) {
            ensure!(
                !text.contains(&spelling),
                "{surface} shows {spelling:?}:\n{text}"
            );
        }
    }
    for (what, credential) in CREDENTIALS.get().into_iter().flatten() {
        for spelling in spellings(credential) {
            ensure!(!text.contains(&spelling), "{surface} shows {what}");
        }
    }
    Ok(())
}

/// The body of a PEM block (no header, no line breaks): what would betray a key however it
/// is printed, searched for by its first 64 characters (a wrapped line).
fn pem_body(pem: &str) -> String {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("");
    body.chars().take(64).collect()
}

/// The webhook's private keys and the members' tokens, as the host's Secrets hold them.
async fn credentials(fed: &Federation) -> anyhow::Result<Vec<(String, String)>> {
    let secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let webhook = wait_for(SEEN, "the webhook's certificate Secret", || async {
        secrets
            .get_opt(flotilla_webhook::DEFAULT_CERT_SECRET)
            .await?
            .and_then(|s| s.data)
            .context("not yet")
    })
    .await?;
    let mut found = Vec::new();
    for key in ["tls.key", "ca.key"] {
        let pem = String::from_utf8(webhook.get(key).context(key)?.0.clone())?;
        ensure!(pem.contains("PRIVATE KEY"), "{key} is no private key");
        found.push((format!("the webhook's {key}"), pem_body(&pem)));
    }
    for member in ["member1", "member2"] {
        let secret = secrets.get(&format!("{member}-token")).await?;
        let data = secret.data.context("no data")?;
        let token = String::from_utf8(data.get("token").context("no token")?.0.clone())?;
        found.push((format!("{member}'s token"), token));
    }
    Ok(found)
}

/// Bearer tokens shown to a dashboard on a non-loopback address (where it reviews them):
/// the host administrator's (allowed), a ServiceAccount's (forbidden) and a made-up one.
async fn dashboard_tokens(
    fed: &Federation,
    ctx: &Context,
) -> anyhow::Result<Vec<(String, String)>> {
    let url = start_dashboard_on(fed, ctx, "0.0.0.0").await?;
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let admin = fed.env.host().admin_token().to_owned();
    let nobody = service_account_token(&fed.host, NS, "default").await?;
    let made_up = "flotilla-e2e-made-up-token-0d9e7a".to_owned();
    let path = format!("/api/object?ns={NS}&kind=FederatedSecret&name=db");
    for (token, expected) in [(&admin, 200), (&nobody, 403), (&made_up, 401)] {
        let (status, _, body) = get_as(addr, &path, Some(token)).await?;
        ensure!(status == expected, "{status}, not {expected}: {body}");
    }
    Ok(vec![
        ("the administrator's token".into(), admin),
        ("a ServiceAccount's token".into(), nobody),
        ("a made-up token".into(), made_up),
    ])
}

/// No credential in any KubeFedCluster's status nor in any Event of the host.
async fn statuses_and_events_show_no_credential(fed: &Federation) -> anyhow::Result<()> {
    let kfcs: Api<flotilla_api::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let listed = kfcs.list(&ListParams::default()).await?;
    let statuses: Vec<_> = listed.items.iter().map(|k| &k.status).collect();
    no_value_in(
        "the KubeFedClusters' status",
        &serde_json::to_string(&statuses)?,
    )?;
    let events = Api::<Event>::all(fed.host.clone())
        .list(&ListParams::default())
        .await?
        .items;
    no_value_in("the host's Events", &serde_json::to_string(&events)?)
}

/// Everything the process logs, kept for the search (the subscriber is installed before the
/// clusters and the control plane start, so it sees all of their lines).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

fn capture_logs() -> anyhow::Result<Logs> {
    let logs = Logs::default();
    tracing_subscriber::fmt()
        .with_env_filter(
            "info,flotilla_controllers=debug,flotilla_multicluster=debug,flotilla_webhook=debug,\
             flotilla_dashboard=debug,flotilla_cli=debug",
        )
        .with_ansi(false)
        .with_writer(logs.clone())
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log capture: {e}"))?;
    Ok(logs)
}

fn secret(name: &str) -> FederatedObject {
    FederatedObject::new("Secret", "secrets", NS, name).template(json!({
        "type": "Opaque",
        "stringData": {"password": IN_STRING_DATA},
        "data": {"token": b64(IN_DATA)}
    }))
}

/// `db`: propagated, with member2's password overridden. `broken`: an override that
/// cannot apply on member2 (its parent is missing), so a Warning Event and a failing
/// status message exist to be searched.
async fn create_secrets(fed: &Federation) -> anyhow::Result<()> {
    let db = secret("db")
        .override_path("member2", "/stringData/password", json!(IN_OVERRIDE))
        .apply(&fed.host)
        .await?;
    secret("broken")
        .override_op(
            "member2",
            "replace",
            "/data/missing/deeper",
            json!(IN_FAILING_OVERRIDE),
        )
        .apply(&fed.host)
        .await?
        .wait_not_propagated("CheckClusters")
        .await?;
    db.wait_propagated().await?;
    // The values did reach the members: what the search looks for is real.
    for (member, password) in fed.members.iter().zip([IN_STRING_DATA, IN_OVERRIDE]) {
        let s = Api::<Secret>::namespaced(member.clone(), NS)
            .get("db")
            .await?;
        let data = s.data.context("member Secret without data")?;
        ensure!(data["password"].0 == password.as_bytes(), "password");
        ensure!(data["token"].0 == IN_DATA.as_bytes(), "token");
    }
    Ok(())
}

async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let (status, body) = http::get(addr, path).await?;
    ensure!(status == 200, "{path}: {status}: {body}");
    Ok(body)
}

/// Every page and JSON answer that can show the objects, once the object page shows each
/// cluster's object (so the rendered objects are part of what is searched).
async fn dashboard_shows_no_value(addr: SocketAddr) -> anyhow::Result<()> {
    let object = format!("/api/object?ns={NS}&kind=FederatedSecret&name=db");
    wait_for(SEEN, "the dashboard to show db propagated", || async {
        let doc: Value = serde_json::from_str(&get(addr, &object).await?)?;
        ensure!(doc["overall"] == "Propagated", "{doc}");
        Ok(())
    })
    .await?;
    let mut paths = vec![
        "/".to_owned(),
        format!("/?ns={NS}"),
        format!("/api/overview?ns={NS}"),
    ];
    for name in ["db", "broken"] {
        let query = format!("ns={NS}&kind=FederatedSecret&name={name}");
        paths.push(format!("/object?{query}"));
        paths.push(format!("/object?{query}&fragment=1"));
        paths.push(format!("/api/object?{query}"));
    }
    for path in &paths {
        let body = get(addr, path).await?;
        no_value_in(&format!("dashboard {path}"), &body)?;
    }
    let page = get(
        addr,
        &format!("/object?ns={NS}&kind=FederatedSecret&name=db"),
    )
    .await?;
    ensure!(
        page.contains("&lt;redacted: 30 bytes&gt;") && page.contains("&lt;redacted: 24 bytes&gt;"),
        "the object page does not show the redacted values:\n{page}"
    );
    Ok(())
}

async fn status_shows_no_value(fed: &Federation) -> anyhow::Result<()> {
    for args in [
        &["status", "-n", NS][..],
        &["status", "-n", NS, "-o", "yaml"][..],
    ] {
        let out = run(fed, args).await.out;
        ensure!(out.contains("broken"), "{args:?}: {out}");
        no_value_in(&format!("flotilla {}", args.join(" ")), &out)?;
    }
    Ok(())
}

/// A manifest changing `db`'s password: the diff shows which key changes but no value;
/// with `--show-secrets` the new value is there.
async fn diff_shows_values_only_when_asked(fed: &Federation) -> anyhow::Result<()> {
    let changed = FederatedObject::new("Secret", "secrets", NS, "db")
        .template(json!({
            "type": "Opaque",
            "stringData": {"password": IN_CHANGE},
            "data": {"token": b64(IN_DATA)}
        }))
        .override_path("member2", "/stringData/password", json!(IN_OVERRIDE));
    let path = fed
        .env
        .kubeconfig_path()
        .with_file_name("changed-secret.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&changed.to_json())?)?;
    let file = path.display().to_string();
    let redacted = run(fed, &["diff", "-f", &file]).await;
    ensure!(
        redacted.code == 1,
        "exit {}: {}",
        redacted.code,
        redacted.out
    );
    ensure!(
        redacted.out.contains("changed>") && redacted.out.contains("member1: would be updated"),
        "the diff does not say which value changes:\n{}",
        redacted.out
    );
    no_value_in("flotilla diff", &redacted.out)?;
    let shown = run(fed, &["diff", "-f", &file, "--show-secrets"]).await;
    ensure!(shown.code == 1, "exit {}: {}", shown.code, shown.out);
    ensure!(
        spellings(IN_CHANGE).iter().any(|s| shown.out.contains(s)),
        "--show-secrets does not show the new value:\n{}",
        shown.out
    );
    let unchanged = run(fed, &["diff", "federatedsecret/db", "-n", NS]).await;
    ensure!(
        unchanged.code == 0,
        "exit {}: {}",
        unchanged.code,
        unchanged.out
    );
    no_value_in("flotilla diff (unchanged)", &unchanged.out)
}

async fn events_show_no_value(fed: &Federation) -> anyhow::Result<()> {
    let events = Api::<Event>::namespaced(fed.host.clone(), NS)
        .list(&ListParams::default())
        .await?
        .items;
    ensure!(
        events
            .iter()
            .any(|e| e.involved_object.name.as_deref() == Some("broken")),
        "no Event about the failing override: {events:?}"
    );
    no_value_in("the Events", &serde_json::to_string(&events)?)
}

#[tokio::test]
async fn no_secret_value_is_shown_anywhere_but_in_diff_show_secrets() -> anyhow::Result<()> {
    let logs = capture_logs()?;
    let fed = federation_with_namespace(2, NS).await?;
    let (_, webhook) =
        flotilla_webhook::local::start_local(fed.host.clone(), DEFAULT_NAMESPACE).await?;
    create_secrets(&fed).await?;
    let ctx = Context::captured();
    let mut held = credentials(&fed).await?;
    held.extend(dashboard_tokens(&fed, &ctx).await?);
    ensure!(
        CREDENTIALS.set(held).is_ok(),
        "the credentials were set before"
    );
    let url = start_dashboard(&fed, &ctx).await?;
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let checks = async {
        dashboard_shows_no_value(addr).await?;
        status_shows_no_value(&fed).await?;
        diff_shows_values_only_when_asked(&fed).await?;
        events_show_no_value(&fed).await?;
        statuses_and_events_show_no_credential(&fed).await
    }
    .await;
    ctx.shutdown.cancel();
    webhook.abort();
    checks?;
    let lines = logs.text();
    ensure!(
        lines.contains("flotilla_controllers"),
        "no control-plane log line was captured"
    );
    no_value_in("the logs", &lines)
}
