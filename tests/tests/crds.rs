//! The generated CRDs on a real API server (v1.20): every CRD installs and becomes
//! Established, the committed YAML and every sample pass `kubectl apply --dry-run=server`,
//! short names and the `federated` category work, and a federated object with a bad
//! override `op` or without `spec.template` is rejected with a message naming the field.
//! The three scenarios share one host cluster (no members, no controller-manager): they
//! only read and dry-run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_api::crdgen::{CRDS_DIR, DEFAULT_TYPES_DIR, all_crds};
use flotilla_tests::{
    EnvOptions, LocalEnv, env_with, objects::create_namespace, scenario,
    scenarios::run_concurrently, wait_for,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::io::AsyncWriteExt as _;

const KUBECTL: &str = "/usr/bin/kubectl";
/// CRDs become Established within a second or two; the machine is shared.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a kubectl call may be retried while discovery catches up with new CRDs.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A host with every generated CRD installed and Established, and the namespaces the
/// samples live in.
async fn host_with_crds() -> anyhow::Result<(LocalEnv, Client)> {
    let env = env_with(EnvOptions {
        members: 0,
        start_controller_manager: false,
        ..EnvOptions::default()
    })
    .await;
    let client = env.host().client().await?;
    install_crds(&client).await?;
    for ns in [DEFAULT_NAMESPACE, "demo"] {
        create_namespace(&client, ns).await?;
    }
    Ok((env, client))
}

/// Server-side applies every CRD of `all_crds()` and waits until each is Established.
async fn install_crds(client: &Client) -> anyhow::Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("flotilla-tests").force();
    let mut names = Vec::new();
    for crd in all_crds() {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in &names {
        wait_for(
            ESTABLISH_TIMEOUT,
            &format!("CRD {name} Established"),
            || {
                let api = api.clone();
                async move {
                    let crd = api.get(name).await?;
                    let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
                    if let Some(c) = conditions
                        .iter()
                        .find(|c| c.type_ == "NamesAccepted" && c.status == "False")
                    {
                        bail!(
                            "names not accepted: {}",
                            c.message.clone().unwrap_or_default()
                        );
                    }
                    ensure!(
                        conditions
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True"),
                        "not Established yet: {conditions:?}"
                    );
                    Ok(())
                }
            },
        )
        .await?;
    }
    Ok(names)
}

/// What a kubectl run printed.
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs kubectl against the host with its own discovery cache, feeding `stdin` if given.
async fn kubectl(env: &LocalEnv, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
    let cache = env.dir().join("kubectl-cache");
    let mut cmd = tokio::process::Command::new(KUBECTL);
    cmd.arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .arg("--context")
        .arg("host")
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("starting kubectl")?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).await?;
        drop(pipe);
    }
    let out = child.wait_with_output().await?;
    Ok(Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs kubectl until it succeeds (discovery may lag a freshly established CRD).
async fn kubectl_ok(env: &LocalEnv, args: &[&str]) -> anyhow::Result<String> {
    let what = format!("kubectl {}", args.join(" "));
    wait_for(DISCOVERY_TIMEOUT, &what, || async {
        let out = kubectl(env, args, None).await?;
        ensure!(out.success, "{}{}", out.stdout, out.stderr);
        Ok(out.stdout)
    })
    .await
}

/// Applies a manifest from stdin with a server-side dry run, expecting a rejection;
/// returns kubectl's stderr.
async fn rejected(env: &LocalEnv, manifest: &str) -> anyhow::Result<String> {
    let out = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(manifest),
    )
    .await?;
    ensure!(
        !out.success,
        "the API server accepted the manifest:\n{manifest}\n{}",
        out.stdout
    );
    Ok(out.stderr)
}

/// Whether an API server message names `<parent>.<field>` or `<parent>[i].<field>`.
fn names_field(message: &str, parent: &str, field: &str) -> bool {
    message.match_indices(parent).any(|(at, _)| {
        let rest = &message[at + parent.len()..];
        let rest = match rest.strip_prefix('[') {
            Some(indexed) => indexed.trim_start_matches(|c: char| c.is_ascii_digit()),
            None => rest,
        };
        let rest = rest.strip_prefix(']').unwrap_or(rest);
        rest.strip_prefix('.')
            .is_some_and(|r| r.starts_with(field) && r[field.len()..].starts_with(':'))
    })
}

fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    Ok(files)
}

/// Every scenario on one host with the CRDs installed.
#[tokio::test]
async fn crds_samples_and_rejections_on_one_host() -> anyhow::Result<()> {
    let (env, client) = host_with_crds().await?;
    run_concurrently(vec![
        scenario!(every_generated_crd_installs_and_becomes_established(
            &env, &client
        )),
        scenario!(every_sample_and_default_type_config_passes_a_server_side_dry_run(&env)),
        scenario!(a_bad_op_or_a_missing_template_is_rejected_naming_the_field(
            &env
        )),
    ])
    .await;
    env.shutdown().await?;
    Ok(())
}

async fn every_generated_crd_installs_and_becomes_established(
    env: &LocalEnv,
    client: &Client,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let live = api.get(&name).await?;
        assert_eq!(live.spec.names.kind, crd.spec.names.kind);
    }

    // The committed YAML is what kubectl users apply; it must say the same.
    let crds_dir = repo_root().join(CRDS_DIR);
    let crds_dir = crds_dir.to_string_lossy();
    kubectl_ok(env, &["apply", "--dry-run=server", "-f", &crds_dir]).await?;

    // Short names and the `federated` category resolve.
    let out = kubectl_ok(env, &["get", "fdeploy,fcm,fns,kfc,ftc,rsp", "-n", "demo"]).await?;
    assert!(!out.contains("error"), "{out}");
    kubectl_ok(env, &["get", "federated", "-A"]).await?;
    kubectl_ok(env, &["get", "kubefed", "-A"]).await?;

    Ok(())
}

async fn every_sample_and_default_type_config_passes_a_server_side_dry_run(
    env: &LocalEnv,
) -> anyhow::Result<()> {
    let samples = yaml_files(&repo_root().join("config/samples"))?;
    assert!(samples.len() >= 5, "samples: {samples:?}");
    for sample in samples {
        let path = sample.to_string_lossy();
        let out = kubectl_ok(env, &["apply", "--dry-run=server", "-f", &path])
            .await
            .with_context(|| format!("sample {path}"))?;
        assert!(out.contains("(server dry run)"), "{path}: {out}");
    }
    let types = repo_root().join(DEFAULT_TYPES_DIR);
    let out = kubectl_ok(
        env,
        &["apply", "--dry-run=server", "-f", &types.to_string_lossy()],
    )
    .await?;
    assert!(
        out.contains("federatedtypeconfig.core.kubefed.io/deployments.apps created"),
        "{out}"
    );

    Ok(())
}

async fn a_bad_op_or_a_missing_template_is_rejected_naming_the_field(
    env: &LocalEnv,
) -> anyhow::Result<()> {
    // Make sure kubectl maps the kind before judging rejections.
    kubectl_ok(env, &["get", "federatedconfigmaps", "-n", "demo"]).await?;

    let bad_op = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedConfigMap
metadata: {name: bad-op, namespace: demo}
spec:
  template: {data: {a: b}}
  placement: {clusters: [{name: member1}]}
  overrides:
  - clusterName: member1
    clusterOverrides:
    - {op: frobnicate, path: /data/a, value: c}
"#;
    let stderr = rejected(env, bad_op).await?;
    // v1.20 prints `spec.overrides.clusterOverrides.op`; newer servers add indices.
    assert!(
        names_field(&stderr, "clusterOverrides", "op")
            && stderr.contains("Unsupported value: \"frobnicate\""),
        "{stderr}"
    );

    let no_template = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedConfigMap
metadata: {name: no-template, namespace: demo}
spec:
  placement: {clusters: [{name: member1}]}
"#;
    // Depending on whether kubectl has fetched the CRD's OpenAPI yet, the rejection comes
    // from kubectl's client-side validation ("missing required field") or from the API
    // server ("Required value"); both name the field.
    let stderr = rejected(env, no_template).await?;
    assert!(
        (stderr.contains("spec.template") && stderr.contains("Required value"))
            || stderr.contains("missing required field \"template\""),
        "{stderr}"
    );

    let no_path = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedConfigMap
metadata: {name: no-path, namespace: demo}
spec:
  template: {}
  overrides:
  - clusterName: member1
    clusterOverrides:
    - {value: c}
"#;
    let stderr = rejected(env, no_path).await?;
    assert!(
        (names_field(&stderr, "clusterOverrides", "path") && stderr.contains("Required value"))
            || stderr.contains("missing required field \"path\""),
        "{stderr}"
    );

    // The same object with a valid op is accepted, so the rejections above are about the fields.
    let good = bad_op.replace("frobnicate", "replace");
    let out = kubectl(env, &["apply", "--dry-run=server", "-f", "-"], Some(&good)).await?;
    assert!(out.success, "{}", out.stderr);

    Ok(())
}
