//! Finding clusters the way kubectl does: `--kubeconfig`, else `$KUBECONFIG` /
//! `~/.kube/config`, else the in-cluster service account; `--context` picks a context.

use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::GlobalArgs;

/// A cluster's client configuration and the kubeconfig context it came from.
#[derive(Clone)]
pub struct ClusterAccess {
    /// The client configuration.
    pub config: Config,
    /// The context's name; `None` for the in-cluster configuration.
    pub context: Option<String>,
}

impl ClusterAccess {
    /// A client for the cluster.
    pub fn client(&self) -> anyhow::Result<Client> {
        // Bearer tokens (inline, a token file, the in-cluster ServiceAccount's) trimmed as
        // client-go trims them.
        flotilla_multicluster::credentials::client(self.config.clone()).with_context(|| {
            format!(
                "building a client for {}",
                self.context
                    .as_deref()
                    .unwrap_or("the in-cluster configuration")
            )
        })
    }

    /// The API server URL without a trailing slash.
    pub fn server(&self) -> String {
        self.config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned()
    }

    /// The CA bundle the kubeconfig trusts for this cluster, as PEM; `None` when it relies on
    /// the system roots.
    pub fn ca_pem(&self) -> Option<String> {
        self.config
            .root_cert
            .as_ref()
            .map(|certs| pem_bundle(certs))
    }
}

/// Loads the configuration of `context` (the current context when `None`) from
/// `kubeconfig`, or from `$KUBECONFIG` / `~/.kube/config`; without any kubeconfig and
/// without a context asked for, falls back to the in-cluster configuration.
pub async fn load(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<ClusterAccess> {
    let file = match kubeconfig {
        Some(path) => Some(
            Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?,
        ),
        None => match Kubeconfig::read() {
            Ok(kc) => Some(kc),
            Err(e) if context.is_some() => {
                return Err(anyhow::Error::new(e).context("reading the kubeconfig"));
            }
            Err(_) => None,
        },
    };
    let Some(file) = file else {
        let config = Config::incluster().context(
            "no kubeconfig found ($KUBECONFIG, ~/.kube/config) and not running in a cluster; pass --kubeconfig",
        )?;
        return Ok(ClusterAccess {
            config,
            context: None,
        });
    };
    let name = context
        .map(str::to_owned)
        .or_else(|| file.current_context.clone());
    if let Some(name) = &name
        && !file.contexts.iter().any(|c| &c.name == name)
    {
        let known: Vec<_> = file.contexts.iter().map(|c| c.name.as_str()).collect();
        anyhow::bail!(
            "context {name:?} is not in the kubeconfig (contexts: {})",
            known.join(", ")
        );
    }
    let options = KubeConfigOptions {
        context: name.clone(),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(file, &options)
        .await
        .with_context(|| format!("loading context {}", name.as_deref().unwrap_or("(current)")))?;
    Ok(ClusterAccess {
        config,
        context: name,
    })
}

/// The host cluster: `--kubeconfig` and `--context`.
pub async fn host(global: &GlobalArgs) -> anyhow::Result<ClusterAccess> {
    load(global.kubeconfig.as_deref(), global.context.as_deref()).await
}

/// Refuses the cluster flags for `command`, which starts its own local clusters: a
/// `--kubeconfig`, `--context` or `-n` given to it would otherwise be silently ignored.
pub fn own_clusters_only(global: &GlobalArgs, command: &str) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        ("--kubeconfig", global.kubeconfig.is_some()),
        ("--context", global.context.is_some()),
        ("--namespace", global.namespace.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    anyhow::ensure!(
        given.is_empty(),
        "flotilla {command} starts its own local clusters; {} does not apply to it{}",
        given.join(", "),
        if command == "dev up" {
            " (--kubeconfig-out writes the kubeconfig of its clusters)"
        } else {
            ""
        }
    );
    Ok(())
}

/// The namespace of namespaced objects: `-n`, else the context's namespace (`default`).
pub fn namespace(global: &GlobalArgs, access: &ClusterAccess) -> String {
    global
        .namespace
        .clone()
        .unwrap_or_else(|| access.config.default_namespace.clone())
}

/// DER certificates as one PEM bundle.
pub fn pem_bundle(certs: &[Vec<u8>]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = String::new();
    for der in certs {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let text = b64.encode(der);
        for chunk in text.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// A kubeconfig context name made fit for a Kubernetes object name (DNS-1123 label):
/// lowercase alphanumerics and `-`, at most `max` characters. Context names like
/// `kubernetes-admin@kubernetes` or `arn:aws:eks:…/prod` otherwise give invalid names.
pub fn dns_label(name: &str, max: usize) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect();
    out.truncate(max);
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() {
        "host".to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_names_become_valid_object_names() {
        assert_eq!(dns_label("host", 30), "host");
        assert_eq!(
            dns_label("kubernetes-admin@Kubernetes", 30),
            "kubernetes-admin-kubernetes"
        );
        assert_eq!(
            dns_label("arn:aws:eks:eu-west-1:1234:cluster/prod", 12),
            "arn-aws-eks"
        );
        assert_eq!(dns_label("@@", 30), "host");
    }

    #[test]
    fn der_certificates_are_wrapped_as_pem_lines_of_64() {
        let pem = pem_bundle(&[vec![0u8; 60], vec![1u8; 3]]);
        let lines: Vec<_> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2);
    }
}
