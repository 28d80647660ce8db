//! Flotilla's image, built by `scripts/image.sh` and run as a Pod would run it
//! (`flotilla_tests::pod`): the image's root filesystem read-only, its non-root user, a real
//! ServiceAccount token with `ca.crt` and `namespace` at the in-cluster path,
//! `KUBERNETES_SERVICE_HOST`/`PORT`, no kubeconfig, and the `args` of the Deployments in
//! `config/`. The host is installed with `kubectl apply --server-side -k config/`.
//!
//! The controller-manager so started propagates to two push members and, with the pull
//! agent started from the same image under `config/agent/`, to a Pull member. Bad
//! credentials — no token, an unreadable one, a wrong CA, a ServiceAccount without the RBAC
//! of `config/` — each keep the process up with the reason on `/readyz` and in its log; a
//! token file ending in a newline is trimmed as client-go trims it (the manager is ready).
//! `scripts/image.sh` builds into its own target directory, leaving `target/release/` alone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_controllers::{
    http_server,
    pull_join::{PullJoinOptions, join_pull},
};
use flotilla_tests::{
    Cluster, LocalEnv,
    cli::service_account_token,
    env,
    federation::bootstrap,
    member::config_map_data,
    objects::{FederatedObject, create_namespace},
    pod::{Image, SERVICE_ACCOUNT_DIR, deployment_args, free_port, service_account_files},
    wait::wait_namespace_in,
    wait_for,
};
use kube::Client;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const MANAGER_SA: &str = "flotilla-controller-manager";
const AGENT_SA: &str = "flotilla-agent";
const NS: &str = "demo";

/// `kubectl apply --server-side -k config/<dir>` (or `-f` a file) into `context`.
fn kubectl_apply(env: &LocalEnv, context: &str, how: &str, path: &str) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["--context", context, "apply", "--server-side", how])
        .arg(root.join(path))
        .output()
        .context("running kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl apply {how} config/{path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A container of the image as a Pod in `cluster` with the ServiceAccount files of `sa_dir`.
struct Pod {
    child: std::sync::Mutex<tokio::process::Child>,
    log: PathBuf,
    probes: Option<SocketAddr>,
}

impl Pod {
    fn start(
        image: &Image,
        cluster: &Cluster,
        name: &str,
        args: Vec<String>,
        volumes: &[(PathBuf, &str)],
        probes: Option<SocketAddr>,
    ) -> anyhow::Result<Pod> {
        let env = [
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_owned()),
            ("KUBERNETES_SERVICE_PORT", cluster.port().to_string()),
            ("POD_NAME", name.to_owned()),
            ("POD_NAMESPACE", DEFAULT_NAMESPACE.to_owned()),
            ("RUST_LOG", "info".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        let log = cluster.dir().join(format!("{name}.log"));
        let child = image.start(&args, &env, volumes, &log)?;
        Ok(Pod {
            child: std::sync::Mutex::new(child),
            log,
            probes,
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/readyz`'s status code and body.
    async fn readyz(&self) -> anyhow::Result<(u16, String)> {
        let addr = self.probes.context("no probe address")?;
        Ok(http_server::get(addr, "/readyz").await?)
    }

    /// The container's process (the child of `unshare`, PID 1 of its namespace): its
    /// `/proc/PID/status` and its root directory as the machine sees it.
    fn process(&self) -> anyhow::Result<(String, PathBuf)> {
        let (_, status, root) = self.container()?;
        Ok((status, root))
    }

    /// The container's PID as the machine sees it, its status and its root directory.
    fn container(&self) -> anyhow::Result<(String, String, PathBuf)> {
        let parent = self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .id()
            .context("exited")?;
        for entry in std::fs::read_dir("/proc")?.filter_map(Result::ok) {
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            if status.lines().any(|l| l == format!("PPid:\t{parent}")) {
                let pid = entry.file_name().to_string_lossy().into_owned();
                return Ok((pid, status, std::fs::read_link(entry.path().join("root"))?));
            }
        }
        anyhow::bail!("no process under {parent}")
    }

    /// Fails when the container has exited.
    fn running(&self) -> anyhow::Result<()> {
        let exited = self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_wait()?;
        if let Some(status) = exited {
            anyhow::bail!("the container exited ({status}):\n{}", self.log());
        }
        Ok(())
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // The container's PID 1 runs under another user, which clears the parent-death
        // signal `unshare` gave it: kill it (that ends its PID namespace), not only `unshare`.
        if let Ok((pid, _, _)) = self.container() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
        }
    }
}

/// The controller-manager Deployment's args, with the probes and the webhook on free ports
/// of this machine (the Pod's own network namespace would have them free).
fn manager_args(metrics: SocketAddr) -> anyhow::Result<Vec<String>> {
    let webhook = free_port()?;
    deployment_args("manager/deployment.yaml")?
        .into_iter()
        .map(|a| {
            Ok(match a.split_once('=') {
                Some(("--metrics-addr", _)) => format!("--metrics-addr={metrics}"),
                Some(("--webhook-addr", _)) => format!("--webhook-addr=127.0.0.1:{webhook}"),
                _ => a.replace("$(POD_NAMESPACE)", DEFAULT_NAMESPACE),
            })
        })
        .collect()
}

/// A controller-manager Pod in the host whose ServiceAccount volume is `sa_dir`.
fn start_manager(image: &Image, env: &LocalEnv, name: &str, sa_dir: &Path) -> anyhow::Result<Pod> {
    let probes: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let volumes = [(sa_dir.to_owned(), SERVICE_ACCOUNT_DIR)];
    Pod::start(
        image,
        env.host(),
        name,
        manager_args(probes)?,
        &volumes,
        Some(probes),
    )
}

/// The host installed from `config/` (CRDs, RBAC, manager, webhook), then the tests'
/// KubeFedConfig (quick health checks) and the default type configs.
async fn install_host(env: &LocalEnv) -> anyhow::Result<Client> {
    kubectl_apply(env, "host", "-k", "")?;
    let host = env.host().client().await?;
    bootstrap().install(&host).await?;
    Ok(host)
}

/// A ServiceAccount volume for `sa` of `cluster`'s control-plane namespace, in `dir`.
async fn service_account(
    client: &Client,
    cluster: &Cluster,
    sa: &str,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let token = service_account_token(client, DEFAULT_NAMESPACE, sa).await?;
    let sa_dir = dir.join(format!("{sa}-sa"));
    service_account_files(&sa_dir, Some(&token), cluster.ca_pem(), DEFAULT_NAMESPACE)?;
    Ok(sa_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_image_runs_the_controller_manager_and_the_pull_agent_as_pods() -> anyhow::Result<()> {
    let env = env(3).await;
    let image = Image::build(env.dir())?;
    ensure!(image.uid == 65532 && image.gid == 65532, "{image:?}");
    let host = install_host(&env).await?;
    let boot = bootstrap();
    let mut members = Vec::new();
    for m in &env.members()[..2] {
        members.push(boot.join(&host, m).await?);
    }
    // member3 in pull mode: its agent, from the image, under config/agent/.
    let pull = &env.members()[2];
    let mut opts = PullJoinOptions::new(pull.name(), env.host().server());
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    let joined = join_pull(&host, &opts).await?;
    kubectl_apply(&env, pull.name(), "-k", "agent")?;
    kubectl_apply(
        &env,
        pull.name(),
        "-f",
        "crds/multicluster.x-k8s.io_appliedworks.yaml",
    )?;
    let pull_client = pull.client().await?;
    let host_dir = env.dir().join("agent-host");
    std::fs::create_dir_all(&host_dir)?;
    std::fs::write(host_dir.join("kubeconfig"), &joined.kubeconfig)?;
    // The probes on a free port of this machine (the Pod's own network would have 8080 free).
    let agent_metrics = format!("127.0.0.1:{}", free_port()?);
    let agent_args: Vec<String> = deployment_args("agent/deployment.yaml")?
        .into_iter()
        .map(|a| match a.as_str() {
            "CLUSTER_NAME" => pull.name().to_owned(),
            "0.0.0.0:8080" => agent_metrics.clone(),
            _ => a,
        })
        .collect();
    let agent_sa = service_account(&pull_client, pull, AGENT_SA, env.dir()).await?;
    let volumes = [
        (agent_sa, SERVICE_ACCOUNT_DIR),
        (host_dir, "/etc/flotilla/host"),
    ];
    let agent = Pod::start(&image, pull, "flotilla-agent-0", agent_args, &volumes, None)?;

    let manager_sa = service_account(&host, env.host(), MANAGER_SA, env.dir()).await?;
    let manager = start_manager(&image, &env, "flotilla-controller-manager-0", &manager_sa)?;
    let result = async {
        wait_for(T, "/readyz: leader", || async {
            manager.running()?;
            let (code, body) = manager.readyz().await?;
            ensure!(
                (code, body.as_str()) == (200, "ok: leader\n"),
                "{code} {body}"
            );
            Ok(())
        })
        .await?;
        create_namespace(&host, NS).await?;
        FederatedObject::namespace(NS).apply(&host).await?;
        let mut all = members.clone();
        all.push(pull_client.clone());
        wait_namespace_in(&all, NS).await?;
        let fcm = FederatedObject::config_map(NS, "from-image", json!({"k": "v"}))
            .override_path(pull.name(), "/data/k", json!("pulled"))
            .apply(&host)
            .await?;
        wait_for(
            T,
            "propagated to two push members and the pull member",
            || async {
                for (m, want) in all.iter().zip(["v", "v", "pulled"]) {
                    let data = config_map_data(m, NS, "from-image")
                        .await?
                        .context("absent")?;
                    ensure!(data.get("k").map(String::as_str) == Some(want), "{data:?}");
                }
                fcm.check_propagated().await
            },
        )
        .await?;
        for pod in [&manager, &agent] {
            pod.running()?;
            runs_as_the_image_says(pod, &image)?;
        }
        let log = manager.log();
        ensure!(log.contains("control plane started"), "{log}");
        ensure!(
            !log.to_lowercase().contains("forbidden"),
            "RBAC denials:\n{log}"
        );
        Ok(())
    }
    .await;
    if result.is_err() {
        eprintln!(
            "controller-manager log:\n{}\nagent log:\n{}",
            manager.log(),
            agent.log()
        );
    }
    result
}

/// The container's process runs as the image's non-root user and group, no supplementary
/// group but that, no capability, chrooted into the image's root filesystem.
fn runs_as_the_image_says(pod: &Pod, image: &Image) -> anyhow::Result<()> {
    let (status, root) = pod.process()?;
    let line = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    ensure!(line("Name:") == "flotilla", "{status}");
    ensure!(line("Uid:") == "65532\t65532\t65532\t65532", "{status}");
    ensure!(line("Gid:") == "65532\t65532\t65532\t65532", "{status}");
    ensure!(line("Groups:") == "65532", "{status}");
    ensure!(line("CapEff:") == "0000000000000000", "{status}");
    ensure!(
        root == image.rootfs,
        "root {} is not the image's",
        root.display()
    );
    Ok(())
}

/// One bad start: the ServiceAccount volume and the reason `/readyz` and the log must give.
struct BadStart {
    name: &'static str,
    sa_dir: PathBuf,
    reason: &'static str,
    detail: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_credentials_keep_the_manager_up_with_the_reason_on_readyz() -> anyhow::Result<()> {
    let env = env(1).await;
    let image = Image::build(env.dir())?;
    let host = install_host(&env).await?;
    let dir = env.dir();
    let good = service_account(&host, env.host(), MANAGER_SA, dir).await?;
    let token = std::fs::read_to_string(good.join("token"))?;
    let ca = env.host().ca_pem();

    let no_token = dir.join("no-token");
    service_account_files(&no_token, None, ca, DEFAULT_NAMESPACE)?;
    let unreadable = dir.join("unreadable");
    service_account_files(&unreadable, Some(&token), ca, DEFAULT_NAMESPACE)?;
    std::fs::set_permissions(
        unreadable.join("token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    let wrong_ca = dir.join("wrong-ca");
    // member1's CA signed member1's serving certificate, not the host's.
    service_account_files(
        &wrong_ca,
        Some(&token),
        env.members()[0].ca_pem(),
        DEFAULT_NAMESPACE,
    )?;
    let no_rbac = service_account(&host, env.host(), "flotilla-without-rbac", dir).await?;
    // A hand-written or mounted token often ends in a newline; no HTTP header may carry one.
    let newline = dir.join("newline-token");
    service_account_files(&newline, Some(&format!("{token}\n")), ca, DEFAULT_NAMESPACE)?;
    let trimmed = start_manager(&image, &env, "newline-token", &newline)?;

    let cases = [
        BadStart {
            name: "no-token",
            sa_dir: no_token.clone(),
            reason: "CredentialsUnavailable",
            detail: "token",
        },
        BadStart {
            name: "unreadable",
            sa_dir: unreadable,
            reason: "CredentialsUnavailable",
            detail: "ermission denied",
        },
        BadStart {
            name: "wrong-ca",
            sa_dir: wrong_ca,
            reason: "CertificateNotTrusted",
            detail: "certificate",
        },
        BadStart {
            name: "no-rbac",
            sa_dir: no_rbac,
            reason: "MissingPermissions",
            detail: "list kubefedclusters.core.kubefed.io in kube-federation-system",
        },
    ];
    let mut pods = Vec::new();
    for case in &cases {
        pods.push(start_manager(&image, &env, case.name, &case.sa_dir)?);
    }
    let result = async {
        for (case, pod) in cases.iter().zip(&pods) {
            wait_for(
                T,
                &format!("{}: the reason on /readyz and in the log", case.name),
                || async {
                    pod.running()?;
                    let (code, body) = pod.readyz().await?;
                    ensure!(code == 503, "{code} {body}");
                    ensure!(
                        body.contains(case.reason) && body.contains(case.detail),
                        "{body}"
                    );
                    let log = pod.log();
                    ensure!(log.contains(case.reason), "not in the log yet:\n{log}");
                    Ok(())
                },
            )
            .await?;
            let log = pod.log();
            ensure!(!log.contains(&token), "the token is in the log");
            let (_, body) = pod.readyz().await?;
            eprintln!("{}: /readyz {body}", case.name);
        }
        wait_for(T, "newline-token: ready with its token trimmed", || async {
            trimmed.running()?;
            let (code, body) = trimmed.readyz().await?;
            ensure!(code == 200, "{code} {body}");
            Ok(())
        })
        .await?;
        ensure!(
            !trimmed.log().contains("HostUnreachable"),
            "a local token reported as an unreachable host:\n{}",
            trimmed.log()
        );
        // Still up after a few retries, and the mounted token is picked up once there.
        std::fs::write(no_token.join("token"), &token)?;
        let pod = &pods[0];
        wait_for(T, "the late token picked up", || async {
            pod.running()?;
            let (code, body) = pod.readyz().await?;
            ensure!(code == 200, "{code} {body}");
            Ok(())
        })
        .await?;
        for pod in &pods[1..] {
            pod.running()?;
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        for (case, pod) in cases.iter().zip(&pods) {
            eprintln!("{} log:\n{}", case.name, pod.log());
        }
        eprintln!("newline-token log:\n{}", trimmed.log());
    }
    result
}

/// A `cargo` for [`image_sh_builds_into_its_own_target_directory`]: records its arguments
/// and puts the tests' binary where the build it was asked for would put `flotilla`
/// (`--target-dir`, else `$CARGO_TARGET_DIR`, else `./target`), as cargo does. A real
/// release build takes many minutes on these machines; what is checked is where the
/// script builds and what it packages, and the rest of the script runs for real.
const RECORDING_CARGO: &str = r#"#!/usr/bin/env bash
printf '%s\n' "$@" >"$CARGO_ARGS_LOG"
dir="${CARGO_TARGET_DIR:-$PWD/target}"
while [ $# -gt 0 ]; do
  case "$1" in --target-dir) dir="$2"; shift 2 ;; *) shift ;; esac
done
mkdir -p "$dir/release" && cp "$BUILT_FLOTILLA" "$dir/release/flotilla"
"#;

/// `scripts/image.sh` without `--binary` builds the image's `--no-default-features` binary
/// into its own target directory: the full `target/release/flotilla` (with `dev` and
/// `bench`, which the README's `flotilla dev up` and the benchmarks run) is left as it
/// was. Runs the script from a scratch copy of the repository's root (the script and the
/// version line of `Cargo.toml`), so the repository's own `target/` is never touched.
#[test]
fn image_sh_builds_into_its_own_target_directory() -> anyhow::Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = std::env::temp_dir().join(format!("flotilla-image-sh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("scripts"))?;
    std::fs::create_dir_all(root.join("target/release"))?;
    std::fs::create_dir_all(root.join("bin"))?;
    std::fs::copy(repo.join("scripts/image.sh"), root.join("scripts/image.sh"))?;
    std::fs::write(
        root.join("Cargo.toml"),
        "[workspace.package]\nversion = \"0.1.0\"\n",
    )?;
    let full = root.join("target/release/flotilla");
    std::fs::write(&full, "the full build, with dev and bench\n")?;
    std::fs::set_permissions(&full, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let cargo = root.join("bin/cargo");
    std::fs::write(&cargo, RECORDING_CARGO)?;
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let path = format!(
        "{}:{}",
        root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let args_log = root.join("cargo-args");
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/image.sh"))
        .arg("--output")
        .arg(root.join("out"))
        .env("PATH", path)
        .env("CARGO_ARGS_LOG", &args_log)
        .env("BUILT_FLOTILLA", flotilla_tests::flotilla_binary()?)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .context("running scripts/image.sh")?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "image.sh failed:\n{printed}");
    ensure!(printed.contains("digest:   sha256:"), "{printed}");
    ensure!(
        std::fs::read(&full)? == b"the full build, with dev and bench\n",
        "image.sh replaced target/release/flotilla:\n{printed}"
    );
    let args = std::fs::read_to_string(&args_log)?;
    for wanted in [
        "build",
        "--release",
        "--no-default-features",
        "--target-dir",
    ] {
        ensure!(args.lines().any(|a| a == wanted), "cargo {args}");
    }
    ensure!(
        root.join("target/image-build/release/flotilla").exists(),
        "the image's binary is not in target/image-build: {printed}"
    );
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
