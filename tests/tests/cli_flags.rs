//! The global flags through the real `flotilla` binary, run without `$KUBECONFIG`, with an
//! empty `$HOME` and outside any Pod, so that nothing but the flags can name a cluster:
//!
//! - every subcommand (the table is checked against clap's list of them) honours the global
//!   `--kubeconfig` and `--context`: given a file that does not exist, or a context the
//!   file does not have, each fails (the controller-manager, which keeps retrying, logs it)
//!   naming it; `dev up` and `bench`, which start their own clusters, refuse the flags
//!   instead of ignoring them; `version` needs no cluster;
//! - `flotilla dns --kubeconfig K --context host` answers a real DNS question from that
//!   cluster's ServiceImports;
//! - bad webhook rotation flags make the controller-manager exit at once with the rule,
//!   before it listens or asks any host; flags that meet the rule are not refused.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use clap::CommandFactory as _;
use flotilla_api::{crdgen, mcs::ServiceImport};
use flotilla_dns::client::{Transport, query};
use flotilla_tests::{env, flotilla_binary, pod::free_port};
use hickory_proto::rr::RecordType;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

/// How long a command may take to say what it must.
const T: Duration = Duration::from_secs(30);

/// What a subcommand must do with cluster flags that lead nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Fail (or log, while it retries) naming the file or context it was given.
    NamesIt,
    /// Refuse the flags: it starts its own clusters.
    Refuses,
    /// Succeed: it needs no cluster.
    NoCluster,
}

/// Every subcommand, with arguments that pass clap, and what it must do.
const SUBCOMMANDS: &[(&[&str], Expect)] = &[
    (
        &["controller-manager", "--metrics-addr", "127.0.0.1:0"],
        Expect::NamesIt,
    ),
    (&["join", "c1", "--cluster-context", "c1"], Expect::NamesIt),
    (&["unjoin", "c1"], Expect::NamesIt),
    (&["enable", "deployments.apps"], Expect::NamesIt),
    (&["disable", "deployments.apps"], Expect::NamesIt),
    (&["federate", "configmaps", "x"], Expect::NamesIt),
    (&["unfederate", "configmaps", "x"], Expect::NamesIt),
    (
        &["orphaning-deletion", "status", "fcm", "x"],
        Expect::NamesIt,
    ),
    (&["diff", "federatedconfigmap/x"], Expect::NamesIt),
    (&["status", "-A"], Expect::NamesIt),
    (&["dashboard", "--address", "127.0.0.1:0"], Expect::NamesIt),
    (&["rollout", "status", "fdeploy/x"], Expect::NamesIt),
    (&["rebalance", "rsp", "x"], Expect::NamesIt),
    (
        &[
            "agent",
            "--cluster-name",
            "c1",
            "--host-kubeconfig",
            "/nonexistent/host.kubeconfig",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
        Expect::NamesIt,
    ),
    (&["uninstall", "--member-objects", "keep"], Expect::NamesIt),
    (&["dns", "--listen", "127.0.0.1:0"], Expect::NamesIt),
    (&["clusterset-routes"], Expect::NamesIt),
    (&["dev", "up"], Expect::Refuses),
    (&["bench"], Expect::Refuses),
    (&["version"], Expect::NoCluster),
];

/// A scratch directory of this test process.
fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("flotilla-cli-flags-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `flotilla ARGS…` with nothing but its flags to find a cluster, its output into `log`.
fn flotilla(home: &Path, args: &[String], log: &Path) -> anyhow::Result<tokio::process::Child> {
    let out = std::fs::File::create(log)?;
    tokio::process::Command::new(flotilla_binary()?)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home)
        .env("RUST_LOG", "info")
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .context("starting flotilla")
}

/// Runs `args` until `done` holds of its output (and exit status, once it exited) or `T`
/// passes; returns the output.
async fn run_until(
    home: &Path,
    args: &[String],
    log: &Path,
    done: impl Fn(&str, Option<std::process::ExitStatus>) -> bool,
) -> anyhow::Result<String> {
    let mut child = flotilla(home, args, log)?;
    let started = Instant::now();
    loop {
        let status = child.try_wait()?;
        let output = std::fs::read_to_string(log).unwrap_or_default();
        if done(&output, status) {
            return Ok(output);
        }
        ensure!(
            started.elapsed() < T,
            "flotilla {}: nothing expected within {T:?} (exit: {status:?}):\n{output}",
            args.join(" ")
        );
        if status.is_some() {
            // Exited without what was expected: say so with its output.
            anyhow::bail!("flotilla {} exited ({status:?}):\n{output}", args.join(" "));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every subcommand with `flags` before its own arguments must do what the table says,
/// `needle` being what it must name.
async fn every_subcommand(home: &Path, flags: &[String], needle: &str) -> anyhow::Result<()> {
    let runs = SUBCOMMANDS.iter().enumerate().map(|(i, (args, expect))| {
        let mut argv = flags.to_vec();
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let log = home.join(format!("{i}-{}.log", args[0]));
        async move {
            let expect = *expect;
            run_until(home, &argv, &log, |out, status| match expect {
                Expect::NamesIt => out.contains(needle),
                Expect::Refuses => {
                    status.is_some_and(|s| !s.success())
                        && out.contains("starts its own local clusters")
                }
                Expect::NoCluster => status.is_some_and(|s| s.success()),
            })
            .await
            .with_context(|| format!("{} ({expect:?} {needle})", args[0]))
        }
    });
    let failures: Vec<String> = futures::future::join_all(runs)
        .await
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

/// A kubeconfig with one context, `host`, at an address nothing answers.
const UNREACHABLE_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: host
  cluster: {server: 'https://127.0.0.1:9'}
users:
- name: host
  user: {token: t}
contexts:
- name: host
  context: {cluster: host, user: host}
current-context: host
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_honours_the_global_kubeconfig_and_context() -> anyhow::Result<()> {
    let listed: BTreeSet<String> = flotilla_cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    let tabled: BTreeSet<String> = SUBCOMMANDS.iter().map(|(a, _)| a[0].to_owned()).collect();
    ensure!(
        listed == tabled,
        "every subcommand needs a row: clap lists {listed:?}, the table {tabled:?}"
    );
    let home = scratch("table")?;
    let missing = home.join("no-such.kubeconfig").display().to_string();
    every_subcommand(&home, &["--kubeconfig".into(), missing.clone()], &missing).await?;
    let file = home.join("unreachable.kubeconfig");
    std::fs::write(&file, UNREACHABLE_KUBECONFIG)?;
    let flags = [
        "--kubeconfig".to_owned(),
        file.display().to_string(),
        "--context".to_owned(),
        "no-such-context".to_owned(),
    ];
    every_subcommand(&home, &flags, "no-such-context").await?;
    std::fs::remove_dir_all(&home)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flotilla_dns_answers_from_the_cluster_the_global_flags_name() -> anyhow::Result<()> {
    let env = env(0).await;
    let host = env.host().client().await?;
    flotilla_controllers::install::install_crds(
        &host,
        &crdgen::mcs_crds(),
        flotilla_api::FIELD_MANAGER,
        T,
    )
    .await?;
    let import = json!({
        "apiVersion": <ServiceImport as kube::Resource>::api_version(&()), "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "ClusterSetIP", "ips": ["10.250.0.9"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    });
    Api::<ServiceImport>::namespaced(host.clone(), "default")
        .patch(
            "web",
            &PatchParams::apply("cli-flags-test"),
            &Patch::Apply(import),
        )
        .await?;
    let home = scratch("dns")?;
    let port = free_port()?;
    let args = [
        "--kubeconfig".to_owned(),
        env.kubeconfig_path().display().to_string(),
        "--context".to_owned(),
        "host".to_owned(),
        "dns".to_owned(),
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
    ];
    let log = home.join("dns.log");
    let mut dns = flotilla(&home, &args, &log)?;
    let addr = ([127, 0, 0, 1], port).into();
    let started = Instant::now();
    let answered = loop {
        if let Some(status) = dns.try_wait()? {
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            anyhow::bail!("flotilla dns exited ({status}):\n{output}");
        }
        let name = "web.default.svc.clusterset.local";
        let ips: Vec<String> = match query(addr, Transport::Udp, name, RecordType::A).await {
            Ok(answer) => answer.answers.iter().map(|r| r.data.to_string()).collect(),
            Err(_) => Vec::new(),
        };
        if !ips.is_empty() {
            break ips;
        }
        ensure!(
            started.elapsed() < T,
            "no answer for {name} within {T:?}:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(answered == ["10.250.0.9"], "{answered:?}");
    dns.kill().await?;
    std::fs::remove_dir_all(&home)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_webhook_rotation_flags_stop_the_controller_manager_before_any_host()
-> anyhow::Result<()> {
    let home = scratch("webhook")?;
    let missing = home.join("no-such.kubeconfig").display().to_string();
    let args = |ca: &str| -> Vec<String> {
        [
            "--kubeconfig",
            &missing,
            "controller-manager",
            "--metrics-addr",
            "127.0.0.1:0",
            "--webhook-addr",
            "127.0.0.1:0",
            "--webhook-ca-lifetime",
            ca,
            "--webhook-cert-lifetime",
            "9s",
            "--webhook-rotation-overlap",
            "6s",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    // 35 s: its last third (11.7 s) does not hold two overlaps of 6 s.
    let refused = run_until(&home, &args("35s"), &home.join("35s.log"), |_, status| {
        status.is_some_and(|s| !s.success())
    })
    .await?;
    ensure!(
        refused.contains("the CA lifetime (35s) must be at least six overlaps (36s)")
            && refused.contains("last third must hold two overlaps"),
        "{refused}"
    );
    ensure!(
        !refused.contains("no-such.kubeconfig"),
        "the host was looked for first:\n{refused}"
    );
    // 39 s: 13 s hold 12 s; the manager goes on to look for its host (and keeps retrying).
    let accepted = run_until(&home, &args("39s"), &home.join("39s.log"), |out, _| {
        out.contains("no-such.kubeconfig")
    })
    .await?;
    ensure!(!accepted.contains("six overlaps"), "{accepted}");
    std::fs::remove_dir_all(&home)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_providers_without_a_plugin_directory_stop_the_controller_manager()
-> anyhow::Result<()> {
    let home = scratch("access-providers")?;
    let missing = home.join("no-such.kubeconfig").display().to_string();
    let file = home.join("providers.json");
    std::fs::write(
        &file,
        r#"{"providers": [{"name": "vault", "execConfig": {"command": "/opt/p/vault"}}]}"#,
    )?;
    let args: Vec<String> = [
        "--kubeconfig",
        &missing,
        "controller-manager",
        "--metrics-addr",
        "127.0.0.1:0",
        "--access-providers",
        &file.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let refused = run_until(&home, &args, &home.join("refused.log"), |_, status| {
        status.is_some_and(|s| !s.success())
    })
    .await?;
    ensure!(
        refused.contains("--access-providers needs --exec-plugin-dir")
            && !refused.contains("no-such.kubeconfig"),
        "{refused}"
    );
    std::fs::remove_dir_all(&home)?;
    Ok(())
}
