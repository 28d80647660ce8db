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
