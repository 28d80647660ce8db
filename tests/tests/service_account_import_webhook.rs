//! The ServiceAccountImport auto-mount webhook on a real host API server, which calls it
//! by URL on 127.0.0.1 over TLS verified with the CA the webhook patched into its
//! MutatingWebhookConfiguration: in a namespace labelled for it, an annotated Pod gets the
//! import's Secret mounted read-only; elsewhere Pods are untouched; an unknown import name
//! is rejected with a message naming it. Pods need not run. With certificates living
//! seconds, the serving certificate and the CA rotate while Pods keep being admitted.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, ServiceAccountImport};
use flotilla_tests::{federation::federation, init_tracing, wait_for};
use flotilla_webhook::{self as webhook, WebhookOptions, rotation::Policy};
use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration,
    core::v1::{Namespace, Pod, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
pub(crate) const CONFIGURATION: &str = "flotilla-serviceaccountimport-test";

fn pod(name: &str, imports: Option<&str>) -> anyhow::Result<Pod> {
    let mut p = json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]},
    });
    if let Some(i) = imports {
        p["metadata"]["annotations"] =
            json!({"multicluster.flotilla.io/service-account-import.name": i});
    }
    Ok(serde_json::from_value(p)?)
}

async fn namespace(host: &Client, name: &str, enabled: bool) -> anyhow::Result<()> {
    let labels = if enabled {
        json!({webhook::NAMESPACE_LABEL: webhook::NAMESPACE_LABEL_VALUE})
    } else {
        json!({})
    };
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    Api::<Namespace>::all(host.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    // The ServiceAccount admission plugin rejects Pods until the default account exists.
    wait_for(T, "the default ServiceAccount", || async {
        Api::<ServiceAccount>::namespaced(host.clone(), name)
            .get_opt("default")
            .await?
            .context("not yet")
    })
    .await?;
    Ok(())
}

/// A MutatingWebhookConfiguration calling `https://127.0.0.1:<port>/mutate-pods` for Pods
/// of labelled namespaces, without a CA bundle (the webhook patches it in); one webhook
/// per port, so every replica is called.
pub(crate) async fn configuration(host: &Client, ports: &[u16]) -> anyhow::Result<()> {
    let webhooks: Vec<_> = ports.iter().enumerate().map(|(i, port)| json!({
        "name": format!("r{i}.serviceaccountimports.multicluster.flotilla.io"),
        "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-pods")},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {webhook::NAMESPACE_LABEL: webhook::NAMESPACE_LABEL_VALUE}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    })).collect();
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": CONFIGURATION},
        "webhooks": webhooks,
    }))?;
    Api::<MutatingWebhookConfiguration>::all(host.clone())
        .create(&PostParams::default(), &config)
        .await?;
    Ok(())
}

fn sai_volumes(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.name.starts_with("sai-"))
        .map(|v| {
            let secret = v.secret.as_ref().and_then(|s| s.secret_name.clone());
            (v.name.clone(), secret.unwrap_or_default())
        })
        .collect()
}

/// Both scenarios share one federation, one after the other: each installs the same
/// MutatingWebhookConfiguration and serves with the same certificate Secret. The first
/// removes its configuration when done; its Secret (a certificate for 30 days) is deleted
/// before the second, which must start from none to see its short-lived ones rotate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_on_one_federation() -> anyhow::Result<()> {
    init_tracing();
    let fed = federation(1).await?;
    let host = fed.host.clone();
    annotated_pods_in_enabled_namespaces_get_the_imports_secret_mounted(host.clone())
        .await
        .context("scenario annotated_pods_in_enabled_namespaces_get_the_imports_secret_mounted")?;
    Api::<Secret>::namespaced(host.clone(), DEFAULT_NAMESPACE)
        .delete(webhook::DEFAULT_CERT_SECRET, &DeleteParams::default())
        .await?;
    certificates_rotate_while_pods_keep_being_admitted(host)
        .await
        .context("scenario certificates_rotate_while_pods_keep_being_admitted")
}

async fn annotated_pods_in_enabled_namespaces_get_the_imports_secret_mounted(
    host: Client,
) -> anyhow::Result<()> {
    namespace(&host, "enabled", true).await?;
    namespace(&host, "plain", false).await?;
    let import: ServiceAccountImport = serde_json::from_value(json!({
        "metadata": {"name": "m1"},
        "spec": {"clusterName": "member1", "namespace": "enabled", "name": "reader"},
    }))?;
    Api::<ServiceAccountImport>::namespaced(host.clone(), "enabled")
        .create(&PostParams::default(), &import)
        .await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    configuration(&host, &[port]).await?;
    let options = WebhookOptions {
        bind: ([127, 0, 0, 1], port).into(),
        names: vec!["127.0.0.1".into()],
        configuration: CONFIGURATION.into(),
        cert_secret: webhook::DEFAULT_CERT_SECRET.into(),
        namespace: DEFAULT_NAMESPACE.into(),
        rotation: Policy::default(),
        metrics: None,
    };
    let (_, serving) = webhook::start(host.clone(), &options).await?;
    let stored = Api::<MutatingWebhookConfiguration>::all(host.clone())
        .get(CONFIGURATION)
        .await?;
    ensure!(
        stored
            .webhooks
            .iter()
            .flatten()
            .all(|w| w.client_config.ca_bundle.is_some()),
        "the CA bundle is patched in"
    );

    let enabled: Api<Pod> = Api::namespaced(host.clone(), "enabled");
    let created = enabled
        .create(&PostParams::default(), &pod("with-import", Some("m1"))?)
        .await?;
    assert_eq!(
        sai_volumes(&created),
        vec![("sai-m1".to_string(), "m1-kubeconfig".to_string())]
    );
    let mount = created.spec.as_ref().context("spec")?.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "sai-m1")
        .context("the import is mounted")?
        .clone();
    assert_eq!(
        mount.mount_path,
        "/var/run/secrets/flotilla.io/serviceaccountimports/m1/"
    );
    assert_eq!(mount.read_only, Some(true));

    let plain = Api::<Pod>::namespaced(host.clone(), "plain")
        .create(&PostParams::default(), &pod("elsewhere", Some("m1"))?)
        .await?;
    assert!(
        sai_volumes(&plain).is_empty(),
        "a namespace without the label is untouched"
    );
    let bare = enabled
        .create(&PostParams::default(), &pod("no-annotation", None)?)
        .await?;
    assert!(sai_volumes(&bare).is_empty());

    let rejected = enabled
        .create(&PostParams::default(), &pod("unknown", Some("m1,nope"))?)
        .await;
    match rejected {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("nope"), "{}", s.message),
        other => panic!("a Pod naming an unknown import must be rejected: {other:?}"),
    }

    serving.abort();
    Api::<MutatingWebhookConfiguration>::all(host)
        .delete(CONFIGURATION, &DeleteParams::default())
        .await?;
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The CAs of the configuration's first webhook's bundle (PEM blocks).
async fn trusted_cas(host: &Client) -> anyhow::Result<Vec<String>> {
    let config = Api::<MutatingWebhookConfiguration>::all(host.clone())
        .get(CONFIGURATION)
        .await?;
    let bundle = config
        .webhooks
        .iter()
        .flatten()
        .next()
        .and_then(|w| w.client_config.ca_bundle.clone())
        .context("a CA bundle")?;
    let text = String::from_utf8(bundle.0)?;
    Ok(text
        .split_inclusive("-----END CERTIFICATE-----")
        .map(str::trim)
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .map(String::from)
        .collect())
}

/// A TLS handshake with the webhook on `port`, verifying its certificate for 127.0.0.1
/// with the CAs of `bundle` only (as the API server does).
async fn handshake(port: u16, bundle: &[String]) -> anyhow::Result<()> {
    use tokio_rustls::{
        TlsConnector,
        rustls::{
            ClientConfig, RootCertStore,
            crypto::ring,
            pki_types::{CertificateDer, ServerName, pem::PemObject},
        },
    };
    let mut roots = RootCertStore::empty();
    for pem in bundle {
        roots.add(CertificateDer::from_pem_slice(pem.as_bytes())?)?;
    }
    let config = ClientConfig::builder_with_provider(std::sync::Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1")?.to_owned(), stream)
        .await
        .with_context(|| format!("a handshake with the replica on port {port}"))?;
    Ok(())
}

/// The serving certificate and the CA the Secret holds now (PEM).
async fn stored_cert_and_ca(host: &Client) -> anyhow::Result<(String, String)> {
    let secret = Api::<Secret>::namespaced(host.clone(), DEFAULT_NAMESPACE)
        .get(webhook::DEFAULT_CERT_SECRET)
        .await?;
    let data = secret.data.context("data")?;
    let text = |k: &str| -> anyhow::Result<String> {
        Ok(String::from_utf8(data.get(k).context("key")?.0.clone())?)
    };
    Ok((text("tls.crt")?, text("ca.crt")?))
}

/// Two replicas share the Secret and each is called by the API server (one webhook each);
/// the certificate lives 9 s and the CA 36 s, so within a minute the serving certificate
/// is renewed several times and the CA rolls over once. A Pod created about every second
/// throughout must be admitted and mounted each time; between Pods, a handshake with each
/// replica every 200 ms must verify with the bundle published at that moment (the API
/// server reuses connections, so Pods alone would miss a certificate it cannot verify).
async fn certificates_rotate_while_pods_keep_being_admitted(host: Client) -> anyhow::Result<()> {
    namespace(&host, "rotating", true).await?;
    let import: ServiceAccountImport = serde_json::from_value(json!({
        "metadata": {"name": "m1"},
        "spec": {"clusterName": "member1", "namespace": "rotating", "name": "reader"},
    }))?;
    Api::<ServiceAccountImport>::namespaced(host.clone(), "rotating")
        .create(&PostParams::default(), &import)
        .await?;
    let ports = [free_port()?, free_port()?];
    configuration(&host, &ports).await?;
    let policy = Policy {
        ca_lifetime: Duration::from_secs(36),
        cert_lifetime: Duration::from_secs(9),
        overlap: Duration::from_secs(4),
        check_every: Duration::from_millis(500),
    };
    // Aborted when dropped, also on an early return.
    let mut replicas = flotilla_multicluster::tasks::AbortOnDrop::default();
    for port in ports {
        let options = WebhookOptions {
            bind: ([127, 0, 0, 1], port).into(),
            names: vec!["127.0.0.1".into()],
            configuration: CONFIGURATION.into(),
            cert_secret: webhook::DEFAULT_CERT_SECRET.into(),
            namespace: DEFAULT_NAMESPACE.into(),
            rotation: policy,
            metrics: None,
        };
        replicas.push(webhook::start(host.clone(), &options).await?.1);
        // Out of step with each other, as replicas are: one loads a certificate while the
        // other still serves the previous.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let pods: Api<Pod> = Api::namespaced(host.clone(), "rotating");
    let (mut certs, mut cas) = (Vec::<String>::new(), Vec::<String>::new());
    let (mut saw_two_cas, mut dropped_after_two) = (false, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let mut created = 0;
    // Until the serving certificate has changed at least twice and the CA once, with the
    // old CA dropped from the bundle afterwards.
    while !(certs.len() >= 3 && cas.len() >= 2 && dropped_after_two) {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no full rotation in time: {} certificates, {} CAs, two CAs trusted at once: {saw_two_cas}",
            certs.len(),
            cas.len()
        );
        let name = format!("p{created}");
        let pod = pods
            .create(&PostParams::default(), &pod(&name, Some("m1"))?)
            .await
            .with_context(|| {
                format!(
                    "creating {name} after {} certificates and {} CAs",
                    certs.len(),
                    cas.len()
                )
            })?;
        ensure!(
            sai_volumes(&pod) == vec![("sai-m1".to_string(), "m1-kubeconfig".to_string())],
            "{name} has the import mounted once"
        );
        created += 1;
        let (cert, ca) = stored_cert_and_ca(&host).await?;
        if !certs.contains(&cert) {
            certs.push(cert);
        }
        if !cas.contains(&ca) {
            cas.push(ca);
        }
        for _ in 0..5 {
            let trusted = trusted_cas(&host).await?;
            saw_two_cas |= trusted.len() == 2;
            dropped_after_two |= saw_two_cas && cas.len() >= 2 && trusted.len() == 1;
            for port in ports {
                handshake(port, &trusted).await?;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tracing::info!(
        created,
        certificates = certs.len(),
        cas = cas.len(),
        "rotated while admitting"
    );

    drop(replicas);
    Api::<MutatingWebhookConfiguration>::all(host)
        .delete(CONFIGURATION, &DeleteParams::default())
        .await?;
    Ok(())
}
