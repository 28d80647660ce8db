//! The webhook for a local federation (`flotilla dev up`): served on a free loopback port,
//! with a MutatingWebhookConfiguration that calls it by URL (no Service: the API server
//! runs on the same machine). In a cluster, `config/webhook/` is used instead.

use std::net::SocketAddr;

use flotilla_api::admiralty::{ADMIRALTY_NAMESPACE_LABEL, ADMIRALTY_NAMESPACE_VALUE};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{
    DEFAULT_CERT_SECRET, DEFAULT_CONFIGURATION, Error, NAMESPACE_LABEL, NAMESPACE_LABEL_VALUE,
    WebhookOptions, server::MUTATE_PATH,
};

/// The configuration calling `url` for Pods created in labelled namespaces. The CA bundle
/// is left out: [`super::start`] fills it in.
/// One webhook per namespace label that turns auto-mount on (Flotilla's, Admiralty's):
/// selectors cannot say "either label", and a Pod passing both is patched only once (the
/// patch skips volumes it already has).
pub fn configuration(name: &str, url: &str) -> serde_json::Value {
    let webhook = |name: &str, label: &str, value: &str| {
        json!({
            "name": name,
            "clientConfig": {"url": url},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {label: value}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            webhook("serviceaccountimports.multicluster.flotilla.io", NAMESPACE_LABEL, NAMESPACE_LABEL_VALUE),
            webhook("serviceaccountimports.multicluster.admiralty.io", ADMIRALTY_NAMESPACE_LABEL, ADMIRALTY_NAMESPACE_VALUE),
        ],
    })
}

/// Starts the webhook on a free port of 127.0.0.1 and points the configuration at it.
pub async fn start_local(
    host: Client,
    namespace: &str,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(Error::Bind)?
        .port();
    let url = format!("https://127.0.0.1:{port}{MUTATE_PATH}");
    let api: Api<MutatingWebhookConfiguration> = Api::all(host.clone());
    api.patch(
        DEFAULT_CONFIGURATION,
        &PatchParams::apply(flotilla_api::FIELD_MANAGER).force(),
        &Patch::Apply(configuration(DEFAULT_CONFIGURATION, &url)),
    )
    .await?;
    let options = WebhookOptions {
        bind: ([127, 0, 0, 1], port).into(),
        names: vec!["127.0.0.1".into()],
        configuration: DEFAULT_CONFIGURATION.into(),
        cert_secret: DEFAULT_CERT_SECRET.into(),
        namespace: namespace.into(),
        rotation: super::rotation::Policy::default(),
        metrics: None,
    };
    super::start(host, &options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_configuration_parses_and_keeps_unlabelled_namespaces_out() {
        let c: MutatingWebhookConfiguration =
            serde_json::from_value(configuration("x", "https://127.0.0.1:1/mutate-pods"))
                .expect("a valid configuration");
        let w = &c.webhooks.as_ref().expect("webhooks")[0];
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:1/mutate-pods")
        );
        let selector = w.namespace_selector.as_ref().expect("selector");
        assert_eq!(
            selector
                .match_labels
                .as_ref()
                .and_then(|l| l.get(NAMESPACE_LABEL))
                .map(String::as_str),
            Some(NAMESPACE_LABEL_VALUE)
        );
        assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
        let admiralty = &c.webhooks.as_ref().expect("webhooks")[1];
        let labels = admiralty
            .namespace_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default();
        assert_eq!(
            labels
                .get("multicluster-service-account")
                .map(String::as_str),
            Some("enabled")
        );
    }
}
