use flotilla_localenv::{EnvOptions, LocalEnv};
use std::time::{Duration, Instant};
fn ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}
fn kind(pid: u32) -> String {
    let c = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default();
    let k = if c.contains("kube-apiserver") {
        "apiserver"
    } else if c.contains("controller-manager") {
        "kcm"
    } else if c.contains("etcd") {
        "etcd"
    } else {
        "other"
    };
    let who = if c.contains("--etcd-prefix=/host") || c.contains("/host/") {
        "host"
    } else {
        "member"
    };
    format!("{k}-{who}")
}
fn sum(pids: &[u32]) -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for &p in pids {
        *m.entry(kind(p)).or_insert(0.0) += ticks(p) as f64 / 100.0;
    }
    m
}
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let members: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let gogc: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(400);
    let mut o = EnvOptions::with_members(members);
    o.apiserver_gogc = Some(gogc);
    o.extra_apiserver_args = args.collect();
    let t = Instant::now();
    let env = LocalEnv::start(o).await?;
    let pids = env.pids();
    println!(
        "started in {:.1}s: {:?}",
        t.elapsed().as_secs_f64(),
        sum(&pids)
    );
    let a = sum(&pids);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let b = sum(&pids);
    for (k, v) in &b {
        println!("idle 60s {k}: {:.2} cpu-s", v - a.get(k).unwrap_or(&0.0));
    }
    env.shutdown().await?;
    Ok(())
}
