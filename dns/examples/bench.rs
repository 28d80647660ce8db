//! DNS load generator: `flotilla dns`'s server on loopback with a zone of N imported services
//! (1,000 by default: ClusterSetIP services, and one in ten headless with three endpoints in
//! two clusters), asked A questions for every name in turn by C closed-loop UDP clients for a
//! fixed time. The same clients against a UDP echo server on loopback (which answers with the
//! question's own bytes) are the same-run baseline: the ratio says what the DNS server costs
//! over the load generator and the loopback themselves.
//!
//! `cargo run --release -p flotilla-dns --example bench -- [--services N] [--clients C]
//! [--seconds S]`

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use flotilla_dns::{
    client,
    server::listen,
    zone::{ImportedEndpoint, ImportedService, Zone},
};
use hickory_proto::{op::Message, rr::RecordType};
use tokio::net::UdpSocket;

struct Options {
    services: usize,
    clients: usize,
    seconds: u64,
}

fn options() -> Options {
    let mut o = Options {
        services: 1000,
        clients: 16,
        seconds: 5,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse::<usize>().ok());
        match (pair[0].as_str(), value) {
            ("--services", Some(n)) => o.services = n.max(1),
            ("--clients", Some(n)) => o.clients = n.max(1),
            ("--seconds", Some(n)) => o.seconds = n.max(1) as u64,
            _ => eprintln!("ignored argument {:?}", pair),
        }
    }
    o
}

fn zone(n: usize) -> Zone {
    let mut services = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..n {
        let headless = i % 10 == 0;
        let ip = IpAddr::V4(Ipv4Addr::new(244, 0, (i / 250) as u8, (i % 250 + 1) as u8));
        services.push(ImportedService {
            namespace: format!("ns{}", i % 20),
            name: format!("svc{i}"),
            headless,
            ips: if headless { Vec::new() } else { vec![ip] },
            ports: vec![("http".into(), "TCP".into(), 80)],
        });
        if headless {
            for e in 0..3u8 {
                endpoints.push(ImportedEndpoint {
                    namespace: format!("ns{}", i % 20),
                    service: format!("svc{i}"),
                    cluster_id: format!("cluster{}", e % 2),
                    addresses: vec![IpAddr::V4(Ipv4Addr::new(
                        10,
                        e,
                        (i / 250) as u8,
                        (i % 250) as u8,
                    ))],
                    hostname: Some(format!("pod{e}")),
                });
            }
        }
    }
    Zone::build(&services, &endpoints, 5, 1)
}

/// A UDP server answering every datagram with itself.
async fn echo() -> anyhow::Result<SocketAddr> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let addr = socket.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..n], from).await;
        }
    });
    Ok(addr)
}

struct Run {
    queries: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Run {
    fn qps(&self) -> f64 {
        self.queries as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies.get(i).copied().unwrap_or_default()
    }
}

/// C clients asking in a closed loop for `seconds`; `check` parses every answer.
async fn load(server: SocketAddr, o: &Options, check: bool) -> anyhow::Result<Run> {
    let names: Arc<Vec<String>> = Arc::new(
        (0..o.services)
            .map(|i| format!("svc{i}.ns{}.svc.clusterset.local", i % 20))
            .collect(),
    );
    let until = Instant::now() + Duration::from_secs(o.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    let clients = o.clients;
    for c in 0..clients {
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let socket = UdpSocket::bind("127.0.0.1:0").await?;
            socket.connect(server).await?;
            let mut buf = vec![0u8; 4096];
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            let mut i = c;
            while Instant::now() < until {
                let id = (i % 65536) as u16;
                let q = client::encode(id, &names[i % names.len()], RecordType::A)?;
                let sent = Instant::now();
                socket.send(&q).await?;
                let got = tokio::time::timeout(client::TIMEOUT, socket.recv(&mut buf)).await;
                match got {
                    Ok(Ok(n)) => {
                        latencies.push(sent.elapsed());
                        if check {
                            let m = Message::from_vec(&buf[..n])?;
                            if m.metadata.id != id || m.answers.is_empty() {
                                errors += 1;
                            }
                        }
                    }
                    _ => errors += 1,
                }
                i += clients;
            }
            anyhow::Ok((latencies, errors))
        }));
    }
    let mut run = Run {
        queries: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for t in tasks {
        let (latencies, errors) = t.await??;
        run.errors += errors;
        run.latencies.extend(latencies);
    }
    run.elapsed = start.elapsed();
    run.queries = run.latencies.len();
    run.latencies.sort();
    Ok(run)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options();
    let built = Instant::now();
    let z = zone(o.services);
    let build_time = built.elapsed();
    let names = z.len();
    let server = listen("127.0.0.1:0".parse()?, Arc::new(RwLock::new(Arc::new(z)))).await?;
    let baseline = load(echo().await?, &o, false).await?;
    let dns = load(server.addr, &o, true).await?;
    println!(
        "zone: {} services, {names} names, built in {:.1} ms",
        o.services,
        build_time.as_secs_f64() * 1e3
    );
    for (what, r) in [("udp echo (baseline)", &baseline), ("flotilla dns", &dns)] {
        println!(
            "{what:20} {} clients {} s: {:>9.0} qps  p50 {:>7.1} µs  p99 {:>7.1} µs  errors {}",
            o.clients,
            o.seconds,
            r.qps(),
            r.percentile(0.5).as_secs_f64() * 1e6,
            r.percentile(0.99).as_secs_f64() * 1e6,
            r.errors
        );
    }
    println!(
        "ratio flotilla dns / baseline: qps {:.2}, p99 {:.2}",
        dns.qps() / baseline.qps(),
        dns.percentile(0.99).as_secs_f64() / baseline.percentile(0.99).as_secs_f64()
    );
    Ok(())
}
