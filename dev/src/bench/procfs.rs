//! Process, cluster and machine figures from Linux's /proc: this process's RSS and peak,
//! CPU seconds of threads and processes, the machine's busy time and description. Reads
//! only; it knows nothing of Kubernetes.

use std::collections::BTreeMap;

use super::report::Machine;

/// Kernel clock ticks per second in /proc (USER_HZ, fixed at 100 by the Linux ABI).
const USER_HZ: f64 = 100.0;

pub(super) fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub(super) fn rss_mib() -> f64 {
    proc_status_kib("VmRSS:").unwrap_or(0) as f64 / 1024.0
}

pub(super) fn peak_rss_mib() -> f64 {
    proc_status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// Resets the process's peak RSS to its current RSS; false where the kernel refuses.
pub(super) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// (comm, utime + stime in seconds) from a /proc `stat` file.
fn parse_stat(s: &str) -> Option<(String, f64)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some((comm, (utime + stime) / USER_HZ))
}

pub(super) fn cpu_of(path: &str) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| parse_stat(&s))
        .map_or(0.0, |(_, cpu)| cpu)
}

/// CPU seconds of this process's threads whose name starts with `prefix`.
pub(super) fn threads_cpu(prefix: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .filter(|(comm, _)| comm.starts_with(prefix))
        .map(|(_, cpu)| cpu)
        .sum()
}

/// Busy CPU seconds of the whole machine since boot.
pub(super) fn machine_busy() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: all but idle and iowait.
    let busy: f64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, x)| x)
        .sum();
    busy / USER_HZ
}

pub(super) fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let memory_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_mib: memory_kib / 1024,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        load_at_start: read("/proc/loadavg")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
    }
}

/// What kind of cluster process `pid` is, from its command line.
pub(super) fn process_group(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let binary = args
        .first()
        .and_then(|a| a.rsplit('/').next())
        .unwrap_or_default();
    match binary {
        "kube-apiserver" if args.iter().any(|a| a == "--etcd-prefix=/host") => {
            "apiserver (host)".into()
        }
        "kube-apiserver" => "apiservers (members)".into(),
        "kube-controller-manager" => "controller-managers".into(),
        b if b.contains("etcd") => "etcd".into(),
        _ => "other".into(),
    }
}

pub(super) fn clusters_cpu(procs: &[(u32, String)]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (pid, group) in procs {
        *out.entry(group.clone()).or_insert(0.0) += cpu_of(&format!("/proc/{pid}/stat"));
    }
    out
}

pub(super) fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_give_the_thread_name_and_cpu_seconds() {
        let line =
            "1234 (flotilla-cp) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 2 0 1 0 0";
        let (comm, cpu) = parse_stat(line).expect("parses");
        assert_eq!(comm, "flotilla-cp");
        assert!((cpu - 3.0).abs() < 1e-9);
    }
}
