//! The member side of Multi-Cluster Services, run in each member cluster from its
//! ServiceImports and imported EndpointSlices (which Flotilla's control plane writes).
//!
//! `flotilla dns` is an authoritative DNS server for `clusterset.local`, following the
//! Multi-Cluster Services DNS specification, answering from a watch cache; cluster ids in
//! endpoint names are the source clusters' About API `cluster.clusterset.k8s.io` property,
//! carried on each imported slice. CoreDNS forwards `clusterset.local` to it
//! (docs/multicluster-services.md). `flotilla clusterset-routes` ([`routes`]) keeps
//! selector-less Services on the ClusterSet IPs so kube-proxy routes them.

pub mod cache;
pub mod client;
pub mod routes;
pub mod server;
pub mod zone;

use std::net::SocketAddr;

use tracing::info;

/// The command line of `flotilla dns`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Address to answer on, over UDP and TCP.
    #[arg(long, env = "FLOTILLA_DNS_LISTEN", default_value = "0.0.0.0:5353")]
    pub listen: SocketAddr,
    /// TTL of every record (and the SOA's negative-caching minimum), in seconds.
    #[arg(long, env = "FLOTILLA_DNS_TTL", default_value_t = 5)]
    pub ttl: u32,
}

/// A DNS server answering for one cluster. Stops when dropped.
pub struct Dns {
    /// Where it answers, over UDP and TCP.
    pub addr: SocketAddr,
    listening: server::Listening,
    _cache: cache::Cache,
}

impl Dns {
    /// Fills the cache from `client`'s cluster, then answers on `listen` (port 0: any
    /// free port, the same for UDP and TCP).
    pub async fn start(client: kube::Client, listen: SocketAddr, ttl: u32) -> anyhow::Result<Dns> {
        let cache = cache::Cache::start(client, ttl).await?;
        let listening = server::listen(listen, cache.zone.clone()).await?;
        Ok(Dns {
            addr: listening.addr,
            listening,
            _cache: cache,
        })
    }

    /// Serves until the listeners fail.
    pub async fn wait(self) -> anyhow::Result<()> {
        let Dns {
            listening, _cache, ..
        } = self;
        let result = listening.wait().await;
        drop(_cache);
        result
    }
}

/// Runs `flotilla dns` with `client` (the CLI builds it from the global `--kubeconfig` and
/// `--context`, else `$KUBECONFIG`, else the in-cluster configuration) until it fails.
pub async fn run(client: kube::Client, args: Args) -> anyhow::Result<()> {
    let dns = Dns::start(client, args.listen, args.ttl).await?;
    info!(addr = %dns.addr, ttl = args.ttl, "answering for clusterset.local");
    dns.wait().await
}
