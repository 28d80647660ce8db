//! Flotilla's OCI image run the way a kubelet runs a container, without a container runtime
//! (`podman run` fails on these machines: crun does not support hybrid cgroups).
//! `scripts/image.sh` builds the archive; umoci unpacks it into a runtime bundle (the root
//! filesystem and a `config.json` with the image's entrypoint, user and environment); each
//! container then runs in a private mount and PID namespace, chrooted into that root
//! filesystem mounted read-only (`readOnlyRootFilesystem`), with `/proc`, a minimal `/dev`,
//! `/etc/hosts` and its volumes bind-mounted read-only, as the image's non-root user, with
//! only the image's and the Pod's environment. The network is the host's, so the local
//! clusters' API servers are reached on 127.0.0.1 as a Pod reaches its Service.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, ensure};
use serde_json::Value;

use crate::flotilla_binary;

/// Where a Pod's ServiceAccount files are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// An unpacked image: its root filesystem and what its configuration says to run.
#[derive(Debug, Clone)]
pub struct Image {
    /// The OCI archive `scripts/image.sh` wrote.
    pub archive: PathBuf,
    /// The root filesystem.
    pub rootfs: PathBuf,
    /// Entrypoint and command, as the runtime bundle has them.
    pub args: Vec<String>,
    /// The image's environment (`NAME=value`).
    pub env: Vec<String>,
    /// The image's user.
    pub uid: u32,
    /// The image's group.
    pub gid: u32,
}

fn run(command: &mut std::process::Command, what: &str) -> anyhow::Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Image {
    /// Builds the image of the debug `flotilla` binary with `scripts/image.sh --binary`
    /// into `dir`, and unpacks it there with umoci (which the script installs).
    pub fn build(dir: &Path) -> anyhow::Result<Image> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = dir.join("image");
        let printed = run(
            std::process::Command::new("bash")
                .arg(root.join("scripts/image.sh"))
                .arg("--binary")
                .arg(flotilla_binary()?)
                .arg("--output")
                .arg(&out),
            "scripts/image.sh",
        )?;
        ensure!(printed.contains("digest:   sha256:"), "{printed}");
        let archive = std::fs::read_dir(&out)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".oci.tar"))
            .context("no .oci.tar written")?;
        let layout = out.join("layout");
        std::fs::create_dir_all(&layout)?;
        run(
            std::process::Command::new("tar")
                .arg("-C")
                .arg(&layout)
                .arg("-xf")
                .arg(&archive),
            "tar -x",
        )?;
        let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
        let tag = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .context("the archive's manifest has no ref name")?
            .to_owned();
        let bundle = out.join("bundle");
        run(
            std::process::Command::new("umoci")
                .arg("unpack")
                .arg("--image")
                .arg(format!("{}:{tag}", layout.display()))
                .arg(&bundle),
            "umoci unpack",
        )?;
        let config: Value = serde_json::from_slice(&std::fs::read(bundle.join("config.json"))?)?;
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let process = &config["process"];
        let id = |key: &str| process["user"][key].as_u64().map(|n| n as u32);
        Ok(Image {
            archive,
            rootfs: bundle.join("rootfs"),
            args: strings(&process["args"]),
            env: strings(&process["env"]),
            uid: id("uid").context("no uid")?,
            gid: id("gid").context("no gid")?,
        })
    }

    /// Starts the image's entrypoint with `args` (the Pod's `args`, replacing the image's
    /// command), `env` and read-only `volumes` (host path, path in the container), its
    /// output to `log`. Killed when the returned child is dropped.
    pub fn start(
        &self,
        args: &[String],
        env: &[(String, String)],
        volumes: &[(PathBuf, &str)],
        log: &Path,
    ) -> anyhow::Result<tokio::process::Child> {
        let entrypoint = self.args.first().context("the image has no entrypoint")?;
        // Mount points, as the runtime creates them.
        for dir in ["proc", "dev"] {
            std::fs::create_dir_all(self.rootfs.join(dir))?;
        }
        let hosts = self.rootfs.join("etc/hosts");
        if !hosts.exists() {
            std::fs::write(&hosts, "")?;
        }
        let mut script = String::from(
            "set -eu\nR=\"$1\"\nmount --bind \"$R\" \"$R\"\nmount -t proc proc \"$R/proc\"\n\
             mount -t tmpfs -o mode=0755,nosuid tmpfs \"$R/dev\"\n\
             for n in null zero full random urandom; do : > \"$R/dev/$n\"; mount --bind \"/dev/$n\" \"$R/dev/$n\"; done\n\
             mount --bind /etc/hosts \"$R/etc/hosts\"\n",
        );
        for (source, target) in volumes {
            std::fs::create_dir_all(self.rootfs.join(target.trim_start_matches('/')))?;
            script.push_str(&format!(
                "mount --bind {src} \"$R\"{dst}\nmount -o remount,bind,ro \"$R\"{dst}\n",
                src = quote(&source.to_string_lossy()),
                dst = quote(target),
            ));
        }
        script.push_str(&format!(
            "mount -o remount,bind,ro \"$R\"\nshift\nexec /usr/sbin/chroot --userspec={uid}:{gid} --groups={gid} \"$R\" \"$@\"\n",
            uid = self.uid,
            gid = self.gid,
        ));
        let output = std::fs::File::create(log)?;
        let mut command = tokio::process::Command::new("/usr/bin/setpriv");
        command
            .args(["--pdeathsig", "KILL", "/usr/bin/unshare"])
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
            ])
            .args(["/bin/sh", "-c", &script, "sh"])
            .arg(&self.rootfs)
            .arg(entrypoint)
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .kill_on_drop(true);
        for pair in &self.env {
            if let Some((k, v)) = pair.split_once('=') {
                command.env(k, v);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command.spawn().context("starting the container")
    }
}

/// `s` quoted for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The files a Pod's ServiceAccount volume holds, written to `dir`: `token` (left out when
/// `None`), `ca.crt` and `namespace`.
pub fn service_account_files(
    dir: &Path,
    token: Option<&str>,
    ca_pem: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some(token) = token {
        std::fs::write(dir.join("token"), token)?;
    }
    std::fs::write(dir.join("ca.crt"), ca_pem)?;
    std::fs::write(dir.join("namespace"), namespace)?;
    Ok(())
}

/// The `args` of the first container of the Deployment in `file` (a path under the
/// repository's `config/`).
pub fn deployment_args(file: &str) -> anyhow::Result<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config")
        .join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let deployment: Value = serde_saphyr::from_str(&text)?;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    args.as_array()
        .context("the Deployment has no args")?
        .iter()
        .map(|a| a.as_str().map(str::to_owned).context("a non-string arg"))
        .collect()
}

/// A TCP port free on 127.0.0.1 now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
