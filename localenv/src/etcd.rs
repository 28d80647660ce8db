//! etcd: where its executable is, how it is invoked, and whether it is healthy. Starting,
//! stopping and restarting it belong to [`crate::LocalEnv`]; this module spawns nothing.

use std::path::PathBuf;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::Error;

/// One etcd member's invocation: the same spec starts it the first time and again after a
/// stop, on the same ports with the same data directory.
#[derive(Clone, Debug)]
pub(crate) struct EtcdSpec {
    /// The etcd executable.
    pub(crate) binary: PathBuf,
    /// Its data directory, which survives a restart.
    pub(crate) data_dir: PathBuf,
    /// Its log file, appended to on every start.
    pub(crate) log: PathBuf,
    /// Loopback port for clients (the API servers).
    pub(crate) client_port: u16,
    /// Loopback port for peers (none: a single member, but etcd needs one).
    pub(crate) peer_port: u16,
}

impl EtcdSpec {
    /// `http://127.0.0.1:<client port>`, the `--etcd-servers` of every apiserver.
    pub(crate) fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The command-line arguments. `--initial-cluster-state=new` only matters for an empty
    /// data directory; a restarted member reads its existing one.
    pub(crate) fn args(&self) -> Vec<String> {
        let client_url = self.client_url();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        vec![
            "--name=flotilla".to_owned(),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=flotilla={peer_url}"),
            "--initial-cluster-state=new".to_owned(),
            // A single member elects itself after the election timeout (1 s by default,
            // halved at start-up); it has no peer whose heartbeats could be late.
            "--heartbeat-interval=20".to_owned(),
            "--election-timeout=200".to_owned(),
            "--logger=zap".to_owned(),
            "--log-level=warn".to_owned(),
        ]
    }
}

/// One HTTP/1.0 request to etcd's `/health`; `true` when it reports healthy.
pub(crate) async fn health(port: u16) -> std::io::Result<bool> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response.contains("\"health\":\"true\""))
}

/// The `etcd` executable: the first on `PATH`, else Debian's `/usr/bin/etcd`.
pub(crate) fn binary() -> Result<PathBuf, Error> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"));
    on_path
        .chain(std::iter::once(PathBuf::from("/usr/bin/etcd")))
        .find(|candidate| candidate.is_file())
        .ok_or(Error::EtcdMissing)
}

/// One key and its value as stored in etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyValue {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

/// Every key under `prefix`, through etcd's JSON gateway (`/v3/kv/range`).
pub(crate) async fn range(port: u16, prefix: &[u8]) -> std::io::Result<Vec<KeyValue>> {
    let body = serde_json::json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix))});
    let response = post(port, "/v3/kv/range", &body).await?;
    let Some(kvs) = response.get("kvs").and_then(|k| k.as_array()) else {
        return Ok(Vec::new());
    };
    kvs.iter()
        .map(|kv| {
            Ok(KeyValue {
                key: unb64(&kv["key"])?,
                value: unb64(&kv["value"])?,
            })
        })
        .collect()
}

/// Writes one key through etcd's JSON gateway (`/v3/kv/put`).
pub(crate) async fn put(port: u16, kv: &KeyValue) -> std::io::Result<()> {
    let body = serde_json::json!({"key": b64(&kv.key), "value": b64(&kv.value)});
    post(port, "/v3/kv/put", &body).await.map(|_| ())
}

/// The first key after every key that starts with `prefix` (etcd's `range_end`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the keyspace.
    vec![0]
}

/// Base64 (standard), as etcd's JSON gateway and a saved host seed hold bytes.
pub(crate) fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(value: &serde_json::Value) -> std::io::Result<Vec<u8>> {
    from_b64(value.as_str().unwrap_or_default())
}

/// The bytes of [`b64`]'s text.
pub(crate) fn from_b64(text: &str) -> std::io::Result<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(std::io::Error::other)
}

/// One HTTP/1.0 POST of a JSON body to etcd's gateway; the JSON it answers.
async fn post(
    port: u16,
    path: &str,
    body: &serde_json::Value,
) -> std::io::Result<serde_json::Value> {
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let (status, payload) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("etcd {path}: no HTTP body")))?;
    if !status.starts_with("HTTP/1.0 200") && !status.starts_with("HTTP/1.1 200") {
        let line = status.lines().next().unwrap_or_default();
        return Err(std::io::Error::other(format!(
            "etcd {path}: {line}: {payload}"
        )));
    }
    serde_json::from_str(payload).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end(b"/host/a/"), b"/host/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
