//! A fault-injecting TCP proxy on loopback, put in front of one cluster's API server so a
//! test can make that cluster slow or unreachable without stopping it.
//!
//! It owns the listening socket and the connections through it, nothing else: it only ever
//! connects to its loopback target, knows nothing of TLS or HTTP (bytes pass through
//! untouched, so clients still verify the API server's certificate), and everything it
//! started stops when the [`FaultProxy`] is dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::error::{Error, io};

/// Bytes read from one side per chunk.
const CHUNK_BYTES: usize = 16 * 1024;
/// Chunks held per direction of a connection before the proxy stops reading (backpressure),
/// which bounds its memory per connection to `CHUNKS * CHUNK_BYTES`.
const CHUNKS: usize = 32;

/// What the proxy does with traffic; switch with [`FaultProxy::set_mode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMode {
    /// Forwards every byte as soon as it arrives.
    PassThrough,
    /// Holds every chunk of bytes, in each direction, for this long after it was read
    /// before forwarding it; chunks keep their order. This is one-way latency: a request
    /// and its response each wait once, a TLS handshake once per flight. New connections
    /// are accepted at once (the TCP handshake is not delayed). The delay in force when a
    /// chunk is due to be written is the one applied, so switching back to
    /// [`FaultMode::PassThrough`] releases held chunks at once.
    Latency(Duration),
    /// Accepts connections but never forwards nor answers anything, on new connections and
    /// on existing ones alike (no reset, no FIN: the peer only sees silence, like a network
    /// partition). Bytes read meanwhile are held (up to the per-connection bound) and
    /// delivered when the mode changes again, as TCP would after a partition heals.
    BlackHole,
}

impl FaultMode {
    /// A short label for logs and reports: `pass-through`, `latency`, `black-hole`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FaultMode::PassThrough => "pass-through",
            FaultMode::Latency(_) => "latency",
            FaultMode::BlackHole => "black-hole",
        }
    }
}

/// Counters of a [`FaultProxy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub accepted: u64,
    /// Bytes written to either side.
    pub forwarded_bytes: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    forwarded_bytes: AtomicU64,
}

/// A TCP proxy from `127.0.0.1:<random port>` to one loopback address, switchable at run
/// time between [`FaultMode`]s. Dropping it closes the listener and every connection.
///
/// ```no_run
/// # async fn demo(env: &flotilla_localenv::LocalEnv) -> Result<(), flotilla_localenv::Error> {
/// use flotilla_localenv::{FaultMode, FaultProxy};
///
/// let proxy = FaultProxy::for_cluster(&env.members()[1]).await?;
/// // Join the member with `proxy.url()` as its API endpoint, then:
/// proxy.set_mode(FaultMode::BlackHole);
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    mode: watch::Sender<FaultMode>,
    counters: Arc<Counters>,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in [`FaultMode::PassThrough`] to `target`, which must be a loopback
    /// address (anything else is refused: the proxy never sends traffic off the machine).
    pub async fn start(target: SocketAddr) -> Result<FaultProxy, Error> {
        if !target.ip().is_loopback() {
            return Err(Error::ProxyTargetNotLoopback(target));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(io("binding the fault proxy to 127.0.0.1"))?;
        let addr = listener
            .local_addr()
            .map_err(io("reading the fault proxy's address"))?;
        let (mode, mode_rx) = watch::channel(FaultMode::PassThrough);
        let counters = Arc::new(Counters::default());
        let accept_task = tokio::spawn(accept_loop(listener, target, mode_rx, counters.clone()));
        tracing::debug!(%addr, %target, "fault proxy started");
        Ok(FaultProxy {
            addr,
            target,
            mode,
            counters,
            accept_task,
        })
    }

    /// A proxy in front of `cluster`'s API server (`127.0.0.1:<its port>`). The API
    /// server's certificate carries an IP SAN for 127.0.0.1, so TLS clients that reach it
    /// through [`FaultProxy::url`] still verify it.
    pub async fn for_cluster(cluster: &crate::Cluster) -> Result<FaultProxy, Error> {
        Self::start(SocketAddr::from((Ipv4Addr::LOCALHOST, cluster.port()))).await
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `https://127.0.0.1:<proxy port>`: an API server URL reaching the target through the
    /// proxy.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The mode in force.
    pub fn mode(&self) -> FaultMode {
        *self.mode.borrow()
    }

    /// Switches the mode; it applies at once to new and existing connections.
    pub fn set_mode(&self, mode: FaultMode) {
        tracing::info!(proxy = %self.addr, mode = mode.as_str(), ?mode, "fault proxy mode");
        self.mode.send_replace(mode);
    }

    /// Connections accepted and bytes forwarded so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            forwarded_bytes: self.counters.forwarded_bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept task owns the JoinSet of connections; aborting it drops the set,
        // which aborts every connection task and closes their sockets.
        self.accept_task.abort();
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mode: watch::Receiver<FaultMode>,
    counters: Arc<Counters>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    counters.accepted.fetch_add(1, Ordering::Relaxed);
                    let (mode, counters) = (mode.clone(), counters.clone());
                    connections.spawn(async move {
                        if let Err(e) = serve(client, target, mode, counters).await {
                            tracing::trace!(%peer, error = %e, "proxied connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Usually EMFILE; pausing keeps a persistent error from spinning.
                    tracing::warn!(error = %e, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One client connection: reads the client at once, connects to the target only when the
/// mode first allows forwarding, then pipes both directions through the mode.
async fn serve(
    client: TcpStream,
    target: SocketAddr,
    mut mode: watch::Receiver<FaultMode>,
    counters: Arc<Counters>,
) -> std::io::Result<()> {
    let (client_read, client_write) = client.into_split();
    let (up_tx, up_rx) = mpsc::channel(CHUNKS);
    let upstream = async {
        wait_not_black_holed(&mut mode).await?;
        let upstream = TcpStream::connect(target).await?;
        let (target_read, target_write) = upstream.into_split();
        let (down_tx, down_rx) = mpsc::channel(CHUNKS);
        tokio::try_join!(
            write_chunks(up_rx, target_write, mode.clone(), &counters),
            read_chunks(target_read, down_tx),
            write_chunks(down_rx, client_write, mode.clone(), &counters),
        )?;
        Ok::<_, std::io::Error>(())
    };
    tokio::try_join!(read_chunks(client_read, up_tx), upstream)?;
    Ok(())
}

/// Reads chunks, stamped with when they were read, until end of stream.
async fn read_chunks(
    mut from: OwnedReadHalf,
    to: mpsc::Sender<(Vec<u8>, Instant)>,
) -> std::io::Result<()> {
    let mut buf = vec![0; CHUNK_BYTES];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        if to.send((buf[..n].to_vec(), Instant::now())).await.is_err() {
            return Ok(());
        }
    }
}

/// Writes chunks once the mode lets each through, then half-closes `to` when the reading
/// side has ended.
async fn write_chunks(
    mut from: mpsc::Receiver<(Vec<u8>, Instant)>,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<FaultMode>,
    counters: &Counters,
) -> std::io::Result<()> {
    while let Some((chunk, read_at)) = from.recv().await {
        wait_until_due(&mut mode, read_at).await?;
        to.write_all(&chunk).await?;
        counters
            .forwarded_bytes
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    to.shutdown().await
}

/// Waits until a chunk read at `read_at` may be written under the mode in force: never
/// while black-holed, not before `read_at + latency` under latency. Re-evaluates whenever
/// the mode changes.
async fn wait_until_due(
    mode: &mut watch::Receiver<FaultMode>,
    read_at: Instant,
) -> std::io::Result<()> {
    loop {
        let due = match wait_not_black_holed(mode).await? {
            FaultMode::Latency(delay) => read_at + delay,
            _ => return Ok(()),
        };
        if Instant::now() >= due {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep_until(due) => {
                if !matches!(*mode.borrow(), FaultMode::BlackHole) {
                    return Ok(());
                }
            }
            changed = mode.changed() => changed.map_err(|_| proxy_gone())?,
        }
    }
}

/// Waits while the mode is [`FaultMode::BlackHole`] and returns the mode that ended it.
async fn wait_not_black_holed(mode: &mut watch::Receiver<FaultMode>) -> std::io::Result<FaultMode> {
    mode.wait_for(|m| !matches!(m, FaultMode::BlackHole))
        .await
        .map(|m| *m)
        .map_err(|_| proxy_gone())
}

fn proxy_gone() -> std::io::Error {
    std::io::Error::other("the fault proxy was dropped")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny HTTP/1.0 server answering every request with `pong` and closing.
    async fn pong_server() -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("test setup");
        let addr = listener.local_addr().expect("test setup");
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0; 1024];
                    while !request.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = stream
                        .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong")
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (addr, task)
    }

    async fn get(addr: SocketAddr) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response)
    }

    async fn timed_get(addr: SocketAddr) -> (Duration, String) {
        let started = Instant::now();
        let response = tokio::time::timeout(Duration::from_secs(5), get(addr))
            .await
            .expect("no answer within 5 s")
            .expect("test setup");
        (started.elapsed(), response)
    }

    #[tokio::test]
    async fn pass_through_forwards_a_request_and_its_response() {
        let (target, _server) = pong_server().await;
        let proxy = FaultProxy::start(target).await.expect("test setup");
        let (_, response) = timed_get(proxy.addr()).await;
        assert!(response.ends_with("pong"), "{response}");
        assert_eq!(proxy.stats().accepted, 1);
        assert!(proxy.stats().forwarded_bytes > 0);
    }

    #[tokio::test]
    async fn latency_delays_the_request_and_the_response_each_once() {
        let (target, _server) = pong_server().await;
        let proxy = FaultProxy::start(target).await.expect("test setup");
        proxy.set_mode(FaultMode::Latency(Duration::from_millis(300)));
        let (elapsed, response) = timed_get(proxy.addr()).await;
        assert!(response.ends_with("pong"), "{response}");
        // Request one way, response the other: two delays, not one per chunk in a row.
        assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
    }

    #[tokio::test]
    async fn a_black_hole_accepts_but_never_answers_and_releases_held_bytes_when_lifted() {
        let (target, _server) = pong_server().await;
        let proxy = FaultProxy::start(target).await.expect("test setup");
        proxy.set_mode(FaultMode::BlackHole);
        let stalled = tokio::spawn(get(proxy.addr()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!stalled.is_finished(), "a black-holed request was answered");
        assert_eq!(proxy.stats().accepted, 1, "the connection was not accepted");
        assert_eq!(proxy.stats().forwarded_bytes, 0);
        proxy.set_mode(FaultMode::PassThrough);
        let response = tokio::time::timeout(Duration::from_secs(5), stalled)
            .await
            .expect("not released after the black hole was lifted")
            .expect("test setup")
            .expect("test setup");
        assert!(response.ends_with("pong"), "{response}");
    }

    #[tokio::test]
    async fn a_black_hole_stalls_connections_opened_before_it() {
        let (target, _server) = pong_server().await;
        let proxy = FaultProxy::start(target).await.expect("test setup");
        let mut stream = TcpStream::connect(proxy.addr()).await.expect("test setup");
        // Let the proxy connect upstream while passing through.
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set_mode(FaultMode::BlackHole);
        stream
            .write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
            .await
            .expect("test setup");
        let mut buf = [0; 64];
        let read = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
        assert!(
            read.is_err(),
            "an existing connection was answered: {read:?}"
        );
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_listener_and_connections() {
        let (target, _server) = pong_server().await;
        let proxy = FaultProxy::start(target).await.expect("test setup");
        proxy.set_mode(FaultMode::BlackHole);
        let addr = proxy.addr();
        let mut stream = TcpStream::connect(addr).await.expect("test setup");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(proxy);
        let mut buf = [0; 64];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
            .await
            .expect("the connection stayed open after the proxy was dropped");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }

    #[tokio::test]
    async fn a_target_off_the_loopback_interface_is_refused() {
        let err = FaultProxy::start("192.0.2.1:443".parse().expect("test setup"))
            .await
            .expect_err("a non-loopback target was accepted");
        assert!(matches!(err, Error::ProxyTargetNotLoopback(_)), "{err}");
    }
}
