//! The DNS server: hickory-server's UDP and TCP listeners, answering every question from the
//! current [`Zone`] (swapped whole when the cache changes), authoritative for
//! `clusterset.local`.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Duration,
};

use hickory_server::{
    Server,
    net::runtime::Time,
    proto::op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode},
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponseBuilder,
};
use tokio::net::{TcpListener, UdpSocket};
use tracing::debug;

use crate::zone::Zone;

/// The zone being served; replaced whole on every change.
pub type SharedZone = Arc<RwLock<Arc<Zone>>>;

/// How long an idle TCP connection is kept.
const TCP_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers from the shared zone.
pub struct Handler {
    zone: SharedZone,
}

impl Handler {
    /// A handler serving `zone`.
    pub fn new(zone: SharedZone) -> Self {
        Handler { zone }
    }

    fn current(&self) -> Arc<Zone> {
        // A poisoned lock still holds a complete zone (it is only ever replaced whole).
        match self.zone.read() {
            Ok(z) => z.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

fn failed(request: &Request, code: ResponseCode) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = code;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let builder = MessageResponseBuilder::from_message_request(request);
        let supported = request.metadata.op_code == OpCode::Query
            && request.metadata.message_type == MessageType::Query;
        let info = match request.request_info() {
            Ok(info) if supported => info,
            Ok(_) => {
                let response = builder.error_msg(&request.metadata, ResponseCode::NotImp);
                return response_handle
                    .send_response(response)
                    .await
                    .unwrap_or_else(|_| failed(request, ResponseCode::NotImp));
            }
            Err(_) => {
                let response = builder.error_msg(&request.metadata, ResponseCode::FormErr);
                return response_handle
                    .send_response(response)
                    .await
                    .unwrap_or_else(|_| failed(request, ResponseCode::FormErr));
            }
        };
        let zone = self.current();
        let answer = zone.answer(&info.query.name().to_string(), info.query.query_type());
        metadata.response_code = answer.code;
        let response = builder.build(
            metadata,
            answer.answers.iter(),
            std::iter::empty(),
            answer.authorities.iter(),
            answer.additionals.iter(),
        );
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                debug!(error = %e, "sending a DNS response failed");
                failed(request, ResponseCode::ServFail)
            }
        }
    }
}

/// A running server: its address (the same port over UDP and TCP). Stops when dropped.
pub struct Listening {
    /// Where it answers, over UDP and TCP.
    pub addr: SocketAddr,
    server: Server<Handler>,
}

impl Listening {
    /// Waits until the server ends (it does not, unless its sockets fail).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        self.server.block_until_done().await?;
        Ok(())
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.server.shutdown_token().cancel();
    }
}

/// Binds UDP and TCP on `addr` (port 0: a free port, the same for both) and serves `zone`.
pub async fn listen(addr: SocketAddr, zone: SharedZone) -> anyhow::Result<Listening> {
    let (udp, tcp) = bind(addr).await?;
    let addr = udp.local_addr()?;
    let mut server = Server::new(Handler::new(zone));
    server.register_socket(udp);
    server.register_listener(tcp, TCP_TIMEOUT, 64);
    Ok(Listening { addr, server })
}

async fn bind(addr: SocketAddr) -> anyhow::Result<(UdpSocket, TcpListener)> {
    if addr.port() != 0 {
        return Ok((UdpSocket::bind(addr).await?, TcpListener::bind(addr).await?));
    }
    // A free UDP port may be taken over TCP: try a few.
    let mut last = None;
    for _ in 0..16 {
        let udp = UdpSocket::bind(addr).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!(
        "no port free over both UDP and TCP on {addr}: {last:?}"
    ))
}
