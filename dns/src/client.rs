//! A minimal DNS client over UDP and TCP (hickory-proto's wire format), for the end-to-end
//! tests and the load generator: one question, the whole response message back.

use std::{net::SocketAddr, time::Duration};

use hickory_proto::{
    op::{Message, Query},
    rr::{Name, RecordType},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpStream, UdpSocket},
};

/// How long a query waits for its answer.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// The transport of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// One datagram each way.
    Udp,
    /// A connection, two-byte length prefixes.
    Tcp,
}

/// The encoded query for `name` and `type_`, with message id `id`.
pub fn encode(id: u16, name: &str, type_: RecordType) -> anyhow::Result<Vec<u8>> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name)?, type_));
    Ok(m.to_vec()?)
}

/// Asks `server` one question.
pub async fn query(
    server: SocketAddr,
    transport: Transport,
    name: &str,
    type_: RecordType,
) -> anyhow::Result<Message> {
    let id = rand_id();
    let bytes = encode(id, name, type_)?;
    let response = tokio::time::timeout(TIMEOUT, async {
        match transport {
            Transport::Udp => udp(server, &bytes).await,
            Transport::Tcp => tcp(server, &bytes).await,
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer from {server} within {TIMEOUT:?}"))??;
    let m = Message::from_vec(&response)?;
    anyhow::ensure!(m.metadata.id == id, "answer to another query");
    Ok(m)
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos % u32::from(u16::MAX)) as u16
}

async fn udp(server: SocketAddr, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(bytes).await?;
    let mut buf = vec![0u8; 65535];
    let n = socket.recv(&mut buf).await?;
    buf.truncate(n);
    Ok(buf)
}

async fn tcp(server: SocketAddr, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(server).await?;
    let len = u16::try_from(bytes.len())?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(bytes).await?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}
