//! Building a member cluster's `kube::Client` from its KubeFedCluster and token Secret,
//! with every problem reported precisely (it becomes the ConfigMalformed message).
//!
//! TLS is verified against `spec.caBundle` (or the system roots when it is absent) unless
//! `disabledTLSValidations` holds `*`. kube 5's `Config` can only turn verification off as a
//! whole (`accept_invalid_certs`); it cannot skip just the subject-name or the validity
//! check. So `SubjectName` and `ValidityPeriod` on their own are *not* honoured: the
//! certificate is still fully verified (failing closed rather than silently trusting any
//! certificate), a warning is logged, and a failing handshake shows in the Offline
//! condition's message. Use `*` to disable verification entirely.
//!
//! kubefed rate-limits member clients (QPS 20, burst 30); kube has no client-side rate
//! limiter, so none is applied here.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use flotilla_api::KubeFedClusterSpec;
use flotilla_api::core::ExecPlugin;
use flotilla_api::core::TlsValidation;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;

/// Why no client can be built from a KubeFedCluster and its Secret. The text is what
/// Flotilla's registry writes into the ConfigMalformed condition.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `spec.secretRef.name` names a Secret that does not exist.
    #[error("Secret {secret} (spec.secretRef.name) does not exist")]
    SecretMissing {
        /// `namespace/name` of the Secret.
        secret: String,
    },
    /// The Secret exists but has no `token` key.
    #[error("Secret {secret} has no key `token`")]
    SecretWithoutToken {
        /// `namespace/name` of the Secret.
        secret: String,
    },
    /// The `token` entry is empty or not printable ASCII.
    #[error("key `token` of Secret {secret} is not a bearer token (empty or not printable ASCII)")]
    InvalidToken {
        /// `namespace/name` of the Secret.
        secret: String,
    },
    /// `spec.caBundle` is not base64.
    #[error("spec.caBundle is not valid base64")]
    CaBundleNotBase64 {
        /// The decoding error.
        #[source]
        source: base64::DecodeError,
    },
    /// `spec.caBundle` decodes, but not to a PEM bundle of certificates.
    #[error("spec.caBundle is not a PEM certificate bundle: {reason}")]
    CaBundleNotPem {
        /// What is wrong with it.
        reason: String,
    },
    /// `spec.apiEndpoint` is not an absolute https URL with a host.
    #[error("spec.apiEndpoint {endpoint:?} is malformed: {reason}")]
    MalformedApiEndpoint {
        /// The endpoint as written.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `spec.proxyURL` is unusable (the URL is not repeated: it may hold credentials).
    #[error("spec.proxyURL is malformed: {reason}")]
    MalformedProxyUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// `spec.exec` is not a usable exec plugin configuration, or may not run here.
    #[error("{reason}")]
    MalformedExec {
        /// What is wrong with it.
        reason: String,
    },
    /// kube refused the configuration (for instance a CA certificate rustls cannot parse).
    #[error("no client can be built from this configuration")]
    ClientBuild {
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

/// Key of the token Secret that holds the bearer token.
pub const TOKEN_KEY: &str = "token";

/// How long a member client may take to open a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything a member client is built from. Two equal inputs build equivalent clients, so
/// the registry rebuilds a client only when these change (spec edit, token rotation).
#[derive(Clone, PartialEq)]
pub struct ClientInputs {
    /// The KubeFedCluster's spec.
    pub spec: KubeFedClusterSpec,
    /// Namespace of the KubeFedCluster and its Secret.
    pub namespace: String,
    /// The Secret's `token` entry: `None` when the Secret is missing, `Some(None)` when it
    /// has no `token` key.
    pub token: Option<Option<Vec<u8>>>,
    /// Where `spec.exec` plugins may lie; `None`: no plugin runs
    /// ([`super::exec_plugin::allowed`]).
    pub exec_plugin_dir: Option<std::path::PathBuf>,
}

impl fmt::Debug for ClientInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the token.
        f.debug_struct("ClientInputs")
            .field("api_endpoint", &self.spec.api_endpoint)
            .field("secret", &self.spec.secret_ref.name)
            .field("secret_present", &self.token.is_some())
            .field(
                "token_present",
                &self.token.as_ref().is_some_and(|t| t.is_some()),
            )
            .finish_non_exhaustive()
    }
}

impl ClientInputs {
    /// Collects the inputs from a KubeFedCluster's spec and the Secret it names (if found).
    pub fn new(spec: &KubeFedClusterSpec, namespace: &str, secret: Option<&Secret>) -> Self {
        ClientInputs {
            // Taints do not make a client: a taint added or lifted must not rebuild it
            // (which would restart every watch of the cluster).
            spec: KubeFedClusterSpec {
                taints: Vec::new(),
                ..spec.clone()
            },
            namespace: namespace.to_owned(),
            token: secret.map(|s| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get(TOKEN_KEY))
                    .map(|b| b.0.clone())
            }),
            exec_plugin_dir: None,
        }
    }

    /// These inputs, running `spec.exec` plugins that lie in `dir`.
    pub fn with_exec_plugin_dir(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.exec_plugin_dir = dir;
        self
    }

    /// `namespace/name` of the token Secret.
    pub fn secret_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.spec.secret_ref.name)
    }

    /// The client configuration, or the exact reason none can be built.
    pub fn config(&self) -> Result<kube::Config, ClientError> {
        let spec = &self.spec;
        let url = parse_api_endpoint(&spec.api_endpoint)?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        match &spec.exec {
            // The plugin runs when the client is built, and again when its token expires.
            Some(plugin) => {
                super::exec_plugin::allowed(plugin, self.exec_plugin_dir.as_deref())
                    .map_err(|reason| ClientError::MalformedExec { reason })?;
                config.auth_info.exec = Some(exec_config(plugin)?);
            }
            None => config.auth_info.token = Some(self.bearer_token()?.into()),
        }
        if let Some(bundle) = spec.ca_bundle.as_deref().filter(|b| !b.trim().is_empty()) {
            config.root_cert = Some(decode_ca_bundle(bundle)?);
        }
        if let Some(proxy) = spec.proxy_url.as_deref().filter(|p| !p.trim().is_empty()) {
            config.proxy_url = Some(parse_proxy_url(proxy)?);
        }
        if spec.disabled_tls_validations.contains(&TlsValidation::All) {
            config.accept_invalid_certs = true;
        } else if !spec.disabled_tls_validations.is_empty() {
            tracing::warn!(
                validations = ?spec.disabled_tls_validations,
                endpoint = %spec.api_endpoint,
                "kube cannot disable single TLS validations; the certificate is fully \
                 verified (use `*` to disable verification)"
            );
        }
        Ok(config)
    }

    /// Builds the client.
    pub fn client(&self) -> Result<Client, ClientError> {
        Client::try_from(self.config()?).map_err(|source| ClientError::ClientBuild { source })
    }

    fn bearer_token(&self) -> Result<String, ClientError> {
        let secret = self.secret_ref();
        let token = match &self.token {
            None => return Err(ClientError::SecretMissing { secret }),
            Some(None) => return Err(ClientError::SecretWithoutToken { secret }),
            Some(Some(token)) => token,
        };
        // Trimmed as client-go trims it: a hand-written Secret often ends in a newline.
        let token = std::str::from_utf8(token)
            .ok()
            .and_then(crate::credentials::usable_token)
            .ok_or(ClientError::InvalidToken { secret })?;
        Ok(token.to_owned())
    }
}

/// kube's exec configuration for a KubeFedCluster's `spec.exec`.
pub fn exec_config(plugin: &ExecPlugin) -> Result<kube::config::ExecConfig, ClientError> {
    let env: Vec<_> = plugin
        .env
        .iter()
        .map(|e| serde_json::json!({"name": e.name, "value": e.value}))
        .collect();
    let api_version = plugin
        .api_version
        .clone()
        .unwrap_or_else(|| "client.authentication.k8s.io/v1beta1".into());
    let value = serde_json::json!({
        "apiVersion": api_version, "command": plugin.command, "args": plugin.args, "env": env,
    });
    serde_json::from_value(value).map_err(|e| ClientError::MalformedExec {
        reason: format!("spec.exec is malformed: {e}"),
    })
}

/// Parses `spec.apiEndpoint`: an absolute `https://` (or `http://`) URL with a host.
pub fn parse_api_endpoint(endpoint: &str) -> Result<http::Uri, ClientError> {
    let malformed = |reason: String| ClientError::MalformedApiEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err(malformed("it is empty".into()));
    }
    let uri: http::Uri = trimmed.parse().map_err(|e| malformed(format!("{e}")))?;
    match uri.scheme_str() {
        Some("https") | Some("http") => {}
        Some(other) => return Err(malformed(format!("scheme {other:?} is not https"))),
        None => {
            return Err(malformed(
                "it has no scheme (expected https://host:port)".into(),
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(malformed("it has no host".into()));
    }
    Ok(uri)
}

/// Parses `spec.proxyURL`: http, https or socks5, with a host. The message never repeats
/// the URL, which may carry credentials.
pub fn parse_proxy_url(url: &str) -> Result<http::Uri, ClientError> {
    let malformed = |reason: String| ClientError::MalformedProxyUrl { reason };
    let uri: http::Uri = url
        .trim()
        .parse()
        .map_err(|e| malformed(format!("not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") | Some("socks5") => {}
        Some(other) => {
            return Err(malformed(format!(
                "scheme {other:?} is not supported (use http, https or socks5)"
            )));
        }
        None => return Err(malformed("it has no scheme (http, https or socks5)".into())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(malformed("it has no host".into()));
    }
    Ok(uri)
}

/// Decodes `spec.caBundle` (base64 of a PEM bundle) into DER certificates.
pub fn decode_ca_bundle(bundle: &str) -> Result<Vec<Vec<u8>>, ClientError> {
    let compact: String = bundle.split_whitespace().collect();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|source| ClientError::CaBundleNotBase64 { source })?;
    pem_certificates(&pem)
}

/// Extracts every `CERTIFICATE` block of a PEM bundle as DER; other block types are skipped.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
    let not_pem = |reason: &str| ClientError::CaBundleNotPem {
        reason: reason.to_owned(),
    };
    let text = std::str::from_utf8(pem)
        .map_err(|_| not_pem("the decoded bundle is binary, not PEM text"))?;
    let mut certs = Vec::new();
    let mut block: Option<(String, String)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            if block.is_some() {
                return Err(not_pem("a BEGIN line inside an unterminated block"));
            }
            block = Some((label.to_owned(), String::new()));
        } else if let Some(label) = line
            .strip_prefix("-----END ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            let Some((begin, body)) = block.take() else {
                return Err(not_pem("an END line without a BEGIN line"));
            };
            if begin != label {
                return Err(not_pem(
                    "a block's END label does not match its BEGIN label",
                ));
            }
            if label == "CERTIFICATE" {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(body)
                    .map_err(|_| not_pem("a CERTIFICATE block is not valid base64"))?;
                if der.is_empty() {
                    return Err(not_pem("a CERTIFICATE block is empty"));
                }
                certs.push(der);
            }
        } else if let Some((_, body)) = block.as_mut() {
            // Headers such as `Proc-Type:` are not part of a certificate block.
            if !line.contains(':') {
                body.push_str(line);
            }
        }
    }
    if block.is_some() {
        return Err(not_pem("the last block has no END line"));
    }
    if certs.is_empty() {
        return Err(not_pem("it holds no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_api::core::LocalSecretReference;
    use k8s_openapi::ByteString;

    use super::*;

    const CERT_A: &str = "-----BEGIN CERTIFICATE-----\nAQID\nBA==\n-----END CERTIFICATE-----\n";
    const CERT_B: &str = "-----BEGIN CERTIFICATE-----\nBQYH\n-----END CERTIFICATE-----\n";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn spec(endpoint: &str) -> KubeFedClusterSpec {
        KubeFedClusterSpec {
            api_endpoint: endpoint.into(),
            secret_ref: LocalSecretReference {
                name: "member1-token".into(),
            },
            ..KubeFedClusterSpec::default()
        }
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    fn problem(inputs: &ClientInputs) -> String {
        match inputs.config() {
            Ok(_) => panic!("expected a malformed configuration"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_bundle_with_two_certificates_yields_both() {
        let certs = decode_ca_bundle(&b64(&format!("{CERT_A}{CERT_B}"))).expect("decodes");
        assert_eq!(certs, vec![vec![1, 2, 3, 4], vec![5, 6, 7]]);
    }

    #[test]
    fn a_bundle_that_is_base64_garbage_is_not_pem() {
        let err = decode_ca_bundle(&b64("\u{1}garbage bytes")).expect_err("rejects");
        assert!(matches!(err, ClientError::CaBundleNotPem { .. }), "{err}");
    }

    #[test]
    fn a_bundle_that_is_not_base64_says_so() {
        let err = decode_ca_bundle("***").expect_err("rejects");
        assert!(
            matches!(err, ClientError::CaBundleNotBase64 { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_missing_secret_is_named_in_the_problem() {
        let inputs = ClientInputs::new(&spec("https://127.0.0.1:6443"), "kfs", None);
        let msg = problem(&inputs);
        assert!(msg.contains("kfs/member1-token"), "{msg}");
        assert!(msg.contains("does not exist"), "{msg}");
    }

    #[test]
    fn a_secret_without_token_is_reported() {
        let s = secret(&[("ca.crt", b"x")]);
        let inputs = ClientInputs::new(&spec("https://127.0.0.1:6443"), "kfs", Some(&s));
        assert!(problem(&inputs).contains("no key `token`"));
    }

    #[test]
    fn a_malformed_endpoint_is_reported() {
        let s = secret(&[("token", b"abc")]);
        for endpoint in ["", "127.0.0.1:6443", "ftp://x", "https://"] {
            let inputs = ClientInputs::new(&spec(endpoint), "kfs", Some(&s));
            assert!(
                problem(&inputs).contains("spec.apiEndpoint"),
                "{endpoint:?}: {}",
                problem(&inputs)
            );
        }
    }

    #[test]
    fn a_bad_proxy_url_is_reported_without_repeating_it() {
        let s = secret(&[("token", b"abc")]);
        let mut sp = spec("https://127.0.0.1:6443");
        sp.proxy_url = Some("ftp://user:hunter2@proxy".into());
        let msg = problem(&ClientInputs::new(&sp, "kfs", Some(&s)));
        assert!(msg.contains("spec.proxyURL"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }

    #[test]
    fn a_valid_configuration_verifies_tls_unless_everything_is_disabled() {
        let s = secret(&[("token", b"abc\n")]);
        let mut sp = spec("https://127.0.0.1:6443");
        sp.ca_bundle = Some(b64(CERT_A));
        sp.proxy_url = Some("socks5://127.0.0.1:1080".into());
        let config = ClientInputs::new(&sp, "kfs", Some(&s))
            .config()
            .expect("valid");
        assert!(!config.accept_invalid_certs);
        assert_eq!(config.root_cert, Some(vec![vec![1, 2, 3, 4]]));
        assert!(config.proxy_url.is_some());

        sp.disabled_tls_validations = vec![TlsValidation::SubjectName];
        let config = ClientInputs::new(&sp, "kfs", Some(&s))
            .config()
            .expect("valid");
        assert!(!config.accept_invalid_certs);

        sp.disabled_tls_validations = vec![TlsValidation::All];
        let config = ClientInputs::new(&sp, "kfs", Some(&s))
            .config()
            .expect("valid");
        assert!(config.accept_invalid_certs);
    }

    #[test]
    fn taints_do_not_change_the_client_inputs() {
        let secret = secret(&[("token", b"t")]);
        let mut tainted = spec("https://127.0.0.1:6443");
        tainted.taints = vec![flotilla_api::taint::Taint {
            key: "drain".into(),
            value: None,
            effect: flotilla_api::taint::TaintEffect::NoExecute,
            time_added: None,
        }];
        assert_eq!(
            ClientInputs::new(&tainted, "ns", Some(&secret)),
            ClientInputs::new(&spec("https://127.0.0.1:6443"), "ns", Some(&secret))
        );
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let s = secret(&[("token", b"s3cr3t-token")]);
        let inputs = ClientInputs::new(&spec("https://127.0.0.1:6443"), "kfs", Some(&s));
        assert!(!format!("{inputs:?}").contains("s3cr3t"));
    }
}
