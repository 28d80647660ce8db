//! A real headless browser for end-to-end tests: Debian's `chromium`, driven by its
//! `chromedriver` through the W3C WebDriver HTTP API (a few JSON calls over hyper). Tests
//! read what a person would see (`innerText` of elements), wait for the page to change by
//! itself, and take screenshots. `scripts/test.sh` installs both packages;
//! `FLOTILLA_CHROMIUM` / `FLOTILLA_CHROMEDRIVER` point at other builds.

use std::{net::SocketAddr, path::PathBuf, process::Stdio, time::Duration};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::{net::TcpStream, process::Child};

use crate::wait_for;

/// How long one WebDriver call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

fn program(var: &str, default: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    if !path.exists() {
        bail!(
            "{} not found: install Debian's chromium and chromium-driver (scripts/test.sh does), or set {var}",
            path.display()
        );
    }
    Ok(path)
}

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless session with a
    /// 1400×1000 window.
    pub async fn start() -> anyhow::Result<Browser> {
        let chromium = program("FLOTILLA_CHROMIUM", "/usr/bin/chromium")?;
        let chromedriver = program("FLOTILLA_CHROMEDRIVER", "/usr/bin/chromedriver")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let driver = tokio::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting chromedriver")?;
        wait_for(
            Duration::from_secs(20),
            "chromedriver to listen",
            || async {
                let status = call(addr, Method::GET, "/status", None).await?;
                anyhow::ensure!(status["ready"] == true, "not ready: {status}");
                Ok(())
            },
        )
        .await?;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000",
                         "--hide-scrollbars", "--lang=en-US"]
            }
        }}});
        let opened = call(addr, Method::POST, "/session", Some(capabilities)).await?;
        let session = opened["sessionId"]
            .as_str()
            .with_context(|| format!("no session: {opened}"))?
            .to_owned();
        Ok(Browser {
            driver,
            addr,
            session,
        })
    }

    async fn session_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        call(self.addr, method, &path, body).await
    }

    /// Opens `url` (and waits for it to load).
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.session_call(Method::POST, "/url", Some(json!({"url": url})))
            .await?;
        Ok(())
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.session_call(
            Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The visible text of the first element matching `selector`, if any.
    pub async fn text(&self, selector: &str) -> anyhow::Result<Option<String>> {
        let v = self
            .execute(
                "var e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
                vec![json!(selector)],
            )
            .await?;
        Ok(v.as_str().map(str::to_owned))
    }

    /// Waits until the text of `selector` satisfies `check`; returns that text.
    pub async fn wait_text(
        &self,
        timeout: Duration,
        selector: &str,
        check: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        wait_for(timeout, &format!("the text of {selector}"), || async {
            let text = self.text(selector).await?;
            match text {
                Some(t) if check(&t) => Ok(t),
                other => bail!("{selector} shows {other:?}"),
            }
        })
        .await
    }

    /// Resizes the window (a taller window shows more of a page in a screenshot).
    pub async fn resize(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.session_call(
            Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await?;
        Ok(())
    }

    /// A PNG screenshot of the window.
    pub async fn screenshot(&self) -> anyhow::Result<Vec<u8>> {
        let v = self.session_call(Method::GET, "/screenshot", None).await?;
        let data = v.as_str().context("screenshot without data")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(data)?)
    }

    /// Closes the session (Chromium exits) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = self.session_call(Method::DELETE, "", None).await;
        let _ = self.driver.kill().await;
    }
}

/// One WebDriver call: its `value`, or the WebDriver error it answered.
async fn call(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let doc: Value = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "WebDriver answered {status} with {:?}",
                String::from_utf8_lossy(&bytes)
            )
        })?;
        anyhow::Ok((status, doc))
    };
    let (status, doc) = tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .with_context(|| format!("WebDriver {path}: no answer"))??;
    if !status.is_success() {
        bail!("WebDriver {path}: {status}: {}", doc["value"]);
    }
    Ok(doc["value"].clone())
}
