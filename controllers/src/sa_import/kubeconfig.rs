//! What an import's Secret holds, built without I/O: a complete kubeconfig for the remote
//! ServiceAccount (server and CA of the KubeFedCluster, the token, the remote namespace, a
//! context named after the import) and the same pieces as separate keys, plus the hash of
//! every input except the token. TLS is always verified: the kubeconfig never says
//! `insecure-skip-tls-verify`, whatever the KubeFedCluster's `disabledTLSValidations`.

use std::collections::BTreeMap;

use base64::Engine as _;
use flotilla_api::{KubeFedClusterSpec, ServiceAccountImportSpec, hash::content_hash};
use k8s_openapi::ByteString;
use serde_json::json;

/// Secret key of the kubeconfig.
pub const CONFIG_KEY: &str = "config";
/// Secret key of the bearer token.
pub const TOKEN_KEY: &str = "token";
/// Secret key of the member's CA bundle (PEM), absent when the cluster has none.
pub const CA_KEY: &str = "ca.crt";
/// Secret key of the member's API server URL.
pub const SERVER_KEY: &str = "server";
/// Secret key of the remote namespace.
pub const NAMESPACE_KEY: &str = "namespace";

/// Where and how the member is reached: the KubeFedCluster's endpoint, CA and proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `spec.apiEndpoint`.
    pub server: String,
    /// `spec.caBundle`: base64 of a PEM bundle.
    pub ca_bundle: Option<String>,
    /// `spec.proxyURL`.
    pub proxy_url: Option<String>,
}

impl Endpoint {
    /// The endpoint of a KubeFedCluster.
    pub fn of(spec: &KubeFedClusterSpec) -> Self {
        Endpoint {
            server: spec.api_endpoint.clone(),
            ca_bundle: spec
                .ca_bundle
                .as_ref()
                .map(|b| b.split_whitespace().collect::<String>())
                .filter(|b| !b.is_empty()),
            proxy_url: spec.proxy_url.clone().filter(|p| !p.is_empty()),
        }
    }

    /// The CA bundle as PEM bytes; an error message when it is not base64.
    pub fn ca_pem(&self) -> Result<Option<Vec<u8>>, String> {
        self.ca_bundle
            .as_ref()
            .map(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| format!("the KubeFedCluster's caBundle is not base64: {e}"))
            })
            .transpose()
    }
}

/// Hash of everything the Secret is built from except the token: when it changes, the
/// Secret is rebuilt with a new token.
pub fn source_hash(cluster: &str, endpoint: &Endpoint, spec: &ServiceAccountImportSpec) -> String {
    content_hash(&json!({
        "cluster": cluster,
        "server": endpoint.server,
        "caBundle": endpoint.ca_bundle,
        "proxyURL": endpoint.proxy_url,
        "namespace": spec.namespace,
        "name": spec.name,
        "expirationSeconds": spec.lifetime_seconds(),
    }))
}

/// The kubeconfig (YAML) of the import `context`: one cluster, one user, one context, all
/// named after the import, with the remote namespace as the context's default.
pub fn kubeconfig(
    context: &str,
    endpoint: &Endpoint,
    namespace: &str,
    token: &str,
) -> Result<String, String> {
    let mut cluster = json!({"server": endpoint.server});
    if let Some(ca) = &endpoint.ca_bundle {
        cluster["certificate-authority-data"] = json!(ca);
    }
    if let Some(proxy) = &endpoint.proxy_url {
        cluster["proxy-url"] = json!(proxy);
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    });
    // The error names no value: the token must never reach a message.
    serde_saphyr::to_string(&config).map_err(|_| "the kubeconfig could not be rendered".into())
}

/// The Secret's data for a token.
pub fn secret_data(
    context: &str,
    endpoint: &Endpoint,
    namespace: &str,
    token: &str,
) -> Result<BTreeMap<String, ByteString>, String> {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let mut data = BTreeMap::from([
        (
            CONFIG_KEY.to_string(),
            bytes(&kubeconfig(context, endpoint, namespace, token)?),
        ),
        (TOKEN_KEY.to_string(), bytes(token)),
        (SERVER_KEY.to_string(), bytes(&endpoint.server)),
        (NAMESPACE_KEY.to_string(), bytes(namespace)),
    ]);
    if let Some(pem) = endpoint.ca_pem()? {
        data.insert(CA_KEY.to_string(), ByteString(pem));
    }
    Ok(data)
}

/// Whether a Secret's data has every key the import writes (a hand-edited Secret missing
/// one is rebuilt).
pub fn is_complete(data: Option<&BTreeMap<String, ByteString>>, endpoint: &Endpoint) -> bool {
    let Some(data) = data else { return false };
    let mut keys = vec![CONFIG_KEY, TOKEN_KEY, SERVER_KEY, NAMESPACE_KEY];
    if endpoint.ca_bundle.is_some() {
        keys.push(CA_KEY);
    }
    keys.iter()
        .all(|k| data.get(*k).is_some_and(|v| !v.0.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn endpoint() -> Endpoint {
        Endpoint {
            server: "https://127.0.0.1:6443".into(),
            ca_bundle: Some(base64::engine::general_purpose::STANDARD.encode(PEM)),
            proxy_url: None,
        }
    }

    fn spec() -> ServiceAccountImportSpec {
        ServiceAccountImportSpec {
            cluster_name: "member1".into(),
            namespace: "foo".into(),
            name: "reader".into(),
            expiration_seconds: None,
        }
    }

    #[test]
    fn the_kubeconfig_names_server_ca_token_namespace_and_a_context_after_the_import() {
        let yaml = kubeconfig("foo-m1", &endpoint(), "foo", "tok").expect("renders");
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("a valid kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("foo-m1"));
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data, endpoint().ca_bundle);
        assert_eq!(cluster.insecure_skip_tls_verify, None);
        let ctx = kc.contexts[0].context.as_ref().expect("context");
        assert_eq!(ctx.namespace.as_deref(), Some("foo"));
        assert_eq!(ctx.user.as_deref(), Some("foo-m1"));
        let user = kc.auth_infos[0].auth_info.as_ref().expect("user");
        assert!(user.token.is_some());
    }

    #[test]
    fn the_secret_holds_the_kubeconfig_and_each_piece_with_the_ca_as_pem() {
        let data = secret_data("i", &endpoint(), "foo", "tok").expect("builds");
        assert_eq!(data[TOKEN_KEY].0, b"tok");
        assert_eq!(data[CA_KEY].0, PEM.as_bytes());
        assert_eq!(data[SERVER_KEY].0, b"https://127.0.0.1:6443");
        assert_eq!(data[NAMESPACE_KEY].0, b"foo");
        assert!(is_complete(Some(&data), &endpoint()));
        let mut partial = data.clone();
        partial.remove(TOKEN_KEY);
        assert!(!is_complete(Some(&partial), &endpoint()));
        assert!(!is_complete(None, &endpoint()));
    }

    #[test]
    fn a_cluster_without_ca_bundle_gets_no_ca_key_and_a_bad_bundle_is_an_error_without_values() {
        let mut e = endpoint();
        e.ca_bundle = None;
        let data = secret_data("i", &e, "foo", "tok").expect("builds");
        assert!(!data.contains_key(CA_KEY));
        assert!(is_complete(Some(&data), &e));
        e.ca_bundle = Some("not base64!".into());
        let err = secret_data("i", &e, "foo", "secret-token").expect_err("bad bundle");
        assert!(!err.contains("secret-token"));
    }

    #[test]
    fn the_source_hash_changes_with_every_input_but_the_token() {
        let base = source_hash("member1", &endpoint(), &spec());
        assert_eq!(base, source_hash("member1", &endpoint(), &spec()));
        assert_ne!(base, source_hash("member2", &endpoint(), &spec()));
        let mut s = spec();
        s.name = "other".into();
        assert_ne!(base, source_hash("member1", &endpoint(), &s));
        let mut s = spec();
        s.expiration_seconds = Some(7200);
        assert_ne!(base, source_hash("member1", &endpoint(), &s));
        let mut e = endpoint();
        e.server = "https://10.0.0.1".into();
        assert_ne!(base, source_hash("member1", &e, &spec()));
    }

    #[test]
    fn the_endpoint_drops_whitespace_in_the_bundle_and_empty_values() {
        let spec = KubeFedClusterSpec {
            api_endpoint: "https://x".into(),
            ca_bundle: Some("QU\nJD ".into()),
            proxy_url: Some(String::new()),
            ..KubeFedClusterSpec::default()
        };
        let e = Endpoint::of(&spec);
        assert_eq!(e.ca_bundle.as_deref(), Some("QUJD"));
        assert_eq!(e.proxy_url, None);
        assert_eq!(e.ca_pem(), Ok(Some(b"ABC".to_vec())));
    }
}
