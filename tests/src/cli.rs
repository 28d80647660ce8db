//! Running `flotilla` commands in-process as the binary runs them, against a test
//! federation: one-shot commands with their output and exit status, and the dashboard on a
//! free port; requests to it with a bearer token, and tokens of ServiceAccounts to send.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use flotilla_cli::{self as cli, Context, Exit};
use http::{Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::{authentication::v1::TokenRequest, core::v1::ServiceAccount};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::net::TcpStream;

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

/// `flotilla --kubeconfig … --context host ARGS`.
fn host_args(fed: &Federation, args: &[&str]) -> Vec<String> {
    let mut full: Vec<String> = vec![
        "flotilla".into(),
        "--kubeconfig".into(),
        fed.env.kubeconfig_path().display().to_string(),
        "--context".into(),
        "host".into(),
    ];
    full.extend(args.iter().map(|a| a.to_string()));
    full
}

/// Runs `flotilla --kubeconfig … --context host ARGS` and returns its output; fails with
/// that output when the command fails.
pub async fn run_ok(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let ctx = Context::captured();
    let result = cli::run(host_args(fed, args), ctx.clone()).await;
    let out = ctx.out.text();
    result.with_context(|| format!("flotilla {args:?} printed:\n{out}"))?;
    Ok(out)
}

/// Runs `flotilla --kubeconfig … --context host ARGS`.
pub async fn run(fed: &Federation, args: &[&str]) -> Run {
    let full = host_args(fed, args);
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
    start_dashboard_on(fed, ctx, "127.0.0.1").await
}

/// Like [`start_dashboard`], bound to `ip` (e.g. `0.0.0.0`: every address, not loopback);
/// the URL returned is on 127.0.0.1 either way.
pub async fn start_dashboard_on(
    fed: &Federation,
    ctx: &Context,
    ip: &str,
) -> anyhow::Result<String> {
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
        format!("{ip}:{port}"),
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

/// GETs `path` from `addr`, with `Authorization: Bearer <token>` when given; the status
/// code, the `WWW-Authenticate` header and the body.
pub async fn get_as(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, Option<String>, String)> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let mut request = Request::get(path).header(header::HOST, addr.to_string());
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new())?)
        .await?;
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.into_body().collect().await?.to_bytes();
    Ok((
        status,
        challenge,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// Creates ServiceAccount `ns/name` (if absent) and returns a token of it (TokenRequest).
pub async fn service_account_token(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    accounts
        .patch(
            name,
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                 "metadata": {"name": name, "namespace": ns}})),
        )
        .await?;
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &TokenRequest::default())
        .await?;
    Ok(answer.status.map(|s| s.token).unwrap_or_default())
}
