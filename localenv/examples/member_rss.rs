//! Resident memory of local clusters' processes: starts a host and N members, waits for
//! them to settle, and prints each process's RSS and the member apiservers' median.
//!
//! ```sh
//! cargo run --example member_rss -p flotilla-localenv -- 10 lean      # lean members
//! cargo run --example member_rss -p flotilla-localenv -- 10 fleet     # lean, no member kcm
//! cargo run --example member_rss -p flotilla-localenv -- 3 plain      # no controller-manager
//! cargo run --example member_rss -p flotilla-localenv -- 3 kcm --watch-cache=false
//! GOGC=30 cargo run --example member_rss -p flotilla-localenv -- 3 plain
//! ```
//!
//! Arguments: members, a mode (`lean`, `fleet` = lean members without a controller-manager
//! beside a host with one, as `flotilla bench --scenario fleet-100` starts them, `kcm`,
//! anything else: no controller-manager), and extra kube-apiserver flags. It also prints the
//! machine's available memory before and after the start. The environment is passed to every process it starts.

use std::time::{Duration, Instant};

use flotilla_localenv::{EnvOptions, LocalEnv};

/// How long the processes settle before they are measured.
const SETTLE: Duration = Duration::from_secs(30);

/// A `/proc/<pid>/…` file as text (NULs as spaces).
fn proc_text(pid: u32, file: &str) -> String {
    std::fs::read(format!("/proc/{pid}/{file}"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn rss_mib(pid: u32) -> u64 {
    proc_text(pid, "status")
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// The machine's `MemAvailable` in MiB.
fn available_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn kind_of(cmdline: &str) -> &'static str {
    if cmdline.contains("kube-apiserver") {
        "apiserver"
    } else if cmdline.contains("kube-controller-manager") {
        "controller-manager"
    } else if cmdline.contains("etcd") {
        "etcd"
    } else {
        "other"
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let members: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let mode = args.next().unwrap_or_default();
    let mut options = EnvOptions::with_members(members);
    options.start_controller_manager = matches!(mode.as_str(), "kcm" | "lean" | "fleet");
    options.lean_members = matches!(mode.as_str(), "lean" | "fleet");
    options.member_controller_manager = mode != "fleet";
    if options.lean_members {
        options.start_batch = Some(10);
    }
    options.extra_apiserver_args = args.collect();
    let available_before = available_mib();
    let started = Instant::now();
    let env = LocalEnv::start(options).await?;
    println!("started in {:.1} s", started.elapsed().as_secs_f64());
    tokio::time::sleep(SETTLE).await;
    let mut members_rss = Vec::new();
    for pid in env.pids() {
        let cmdline = proc_text(pid, "cmdline");
        let (kind, rss) = (kind_of(&cmdline), rss_mib(pid));
        let host = cmdline.contains("--etcd-prefix=/host ") || cmdline.contains("/host/");
        if kind == "apiserver" && !host {
            members_rss.push(rss);
        }
        println!(
            "{kind:<18} {pid:>7} {rss:>5} MiB{}",
            if host { "  (host)" } else { "" }
        );
    }
    members_rss.sort_unstable();
    if let (Some(median), Some(max)) = (members_rss.get(members_rss.len() / 2), members_rss.last())
    {
        println!(
            "member apiservers: {} · median {median} MiB · max {max} MiB",
            members_rss.len()
        );
    }
    let available_after = available_mib();
    println!(
        "MemAvailable: {available_before} MiB before, {available_after} MiB after the start ({} MiB used)",
        available_before.saturating_sub(available_after)
    );
    env.shutdown().await?;
    Ok(())
}
