//! ServiceAccountImport on real clusters: an import in the host yields a kubeconfig Secret
//! whose identity is the remote ServiceAccount and nothing more; a restarted control plane
//! writes nothing; the Secret is recreated when deleted, garbage-collected with the import, refreshed at its refresh point and
//! left alone before it; failures (unknown cluster, missing ServiceAccount) show as the
//! Ready condition's reason and as Warning Events that never carry a token.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    ServiceAccountImport,
    multicluster::{EXPIRATION_ANNOTATION, REFRESH_FRACTION_ANNOTATION},
};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, bootstrap, federation},
    init_tracing, wait_for,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Namespace, Secret, ServiceAccount},
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const NS: &str = "foo";

async fn create<K>(api: &Api<K>, obj: serde_json::Value) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

/// Namespace `ns` in the host, and in member1 a ServiceAccount `reader` that may list
/// ConfigMaps in `ns` (and nothing else), plus a ConfigMap to list.
async fn setup(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    let member = &fed.members[0];
    for client in [&fed.host, member] {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        create(&namespaces, json!({"metadata": {"name": ns}})).await?;
    }
    create(
        &Api::<ServiceAccount>::namespaced(member.clone(), ns),
        json!({"metadata": {"name": "reader"}}),
    )
    .await?;
    create(
        &Api::<Role>::namespaced(member.clone(), ns),
        json!({"metadata": {"name": "list-configmaps"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await?;
    create(
        &Api::<RoleBinding>::namespaced(member.clone(), ns),
        json!({"metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "list-configmaps"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}),
    )
    .await?;
    create(
        &Api::<ConfigMap>::namespaced(member.clone(), ns),
        json!({"metadata": {"name": "in-member1"}, "data": {"k": "v"}}),
    )
    .await?;
    Ok(())
}

fn imports(fed: &Federation, ns: &str) -> Api<ServiceAccountImport> {
    Api::namespaced(fed.host.clone(), ns)
}

fn secrets(fed: &Federation, ns: &str) -> Api<Secret> {
    Api::namespaced(fed.host.clone(), ns)
}

/// Creates an import `ns/name` of `cluster`'s `ns/<sa>`, with a refresh fraction when
/// given.
async fn import(
    fed: &Federation,
    ns: &str,
    name: &str,
    cluster: &str,
    sa: &str,
    refresh_fraction: Option<&str>,
) -> anyhow::Result<ServiceAccountImport> {
    let mut obj = json!({
        "apiVersion": "multicluster.flotilla.io/v1alpha1",
        "kind": "ServiceAccountImport",
        "metadata": {"name": name},
        "spec": {"clusterName": cluster, "namespace": ns, "name": sa, "expirationSeconds": 600},
    });
    if let Some(f) = refresh_fraction {
        obj["metadata"]["annotations"] = json!({REFRESH_FRACTION_ANNOTATION: f});
    }
    create(&imports(fed, ns), obj).await
}

/// Waits until the import's Ready condition has `reason`; returns the import.
async fn wait_reason(
    fed: &Federation,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<ServiceAccountImport> {
    wait_for(
        T,
        &format!("import {name} with reason {reason}"),
        || async {
            let i = imports(fed, ns).get(name).await?;
            let got = i
                .status
                .as_ref()
                .and_then(|s| s.ready())
                .and_then(|c| c.reason.clone());
            ensure!(got.as_deref() == Some(reason), "reason is {got:?}");
            Ok(i)
        },
    )
    .await
}

/// The Secret's `key` as a string.
fn value(secret: &Secret, key: &str) -> anyhow::Result<String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .with_context(|| format!("no {key} in the Secret"))?;
    Ok(String::from_utf8(bytes.0.clone())?)
}

/// A client built from nothing but the Secret's `config` kubeconfig.
async fn client_from(secret: &Secret) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&value(secret, "config")?)?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
    Ok(Client::try_from(config)?)
}

async fn wait_secret(fed: &Federation, ns: &str, name: &str) -> anyhow::Result<Secret> {
    wait_for(T, &format!("Secret {name}"), || async {
        secrets(fed, ns).get_opt(name).await?.context("not yet")
    })
    .await
}

/// Both scenarios share one federation, each in its own namespace, one after the other:
/// the first restarts the control plane, which must not happen while the second waits for
/// refreshes and counts its reconciles in the control plane's metrics.
#[tokio::test]
async fn imports_on_one_federation() -> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation(1).await?;
    an_import_gives_the_remote_service_accounts_identity_and_nothing_more(&mut fed, NS)
        .await
        .context(
            "scenario an_import_gives_the_remote_service_accounts_identity_and_nothing_more",
        )?;
    tokens_are_refreshed_at_the_refresh_point_and_failures_are_reported(&fed, "refresh")
        .await
        .context("scenario tokens_are_refreshed_at_the_refresh_point_and_failures_are_reported")
}

async fn an_import_gives_the_remote_service_accounts_identity_and_nothing_more(
    fed: &mut Federation,
    ns: &str,
) -> anyhow::Result<()> {
    setup(fed, ns).await?;
    import(fed, ns, "reader-m1", "member1", "reader", None).await?;
    let ready = wait_reason(fed, ns, "reader-m1", "TokenIssued").await?;
    let status = ready.status.clone().context("status")?;
    assert_eq!(status.secret_name.as_deref(), Some("reader-m1-kubeconfig"));
    assert!(status.expiration_timestamp.is_some());
    let secret = wait_secret(fed, ns, "reader-m1-kubeconfig").await?;
    assert_eq!(value(&secret, "namespace")?, ns);
    assert_eq!(
        secret.owner_references()[0].uid,
        ready.uid().context("uid")?,
        "the import owns its Secret"
    );

    // The kubeconfig alone reaches member1 (TLS verified with the CA it carries) as the
    // remote ServiceAccount: ConfigMaps in foo are listed, Secrets are forbidden.
    let remote = client_from(&secret).await?;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), ns)
        .list(&ListParams::default())
        .await?;
    assert!(cms.items.iter().any(|c| c.name_any() == "in-member1"));
    let denied = Api::<Secret>::namespaced(remote, ns)
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "listing Secrets must be forbidden: {denied:?}"
    );

    // In the steady state nothing is written: not the Secret, not the import's status.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let secret_now = secrets(fed, ns).get("reader-m1-kubeconfig").await?;
    assert_eq!(secret_now.resource_version(), secret.resource_version());
    let import_now = imports(fed, ns).get("reader-m1").await?;
    assert_eq!(import_now.resource_version(), ready.resource_version());

    // A restarted control plane reads the refresh point from the Secret's annotations: it
    // requests no new token and writes nothing.
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    fed.control_plane = Some(bootstrap().start_control_plane(&fed.host, 1).await?);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after_restart = secrets(fed, ns).get("reader-m1-kubeconfig").await?;
    assert_eq!(after_restart.resource_version(), secret.resource_version());
    let import_after = imports(fed, ns).get("reader-m1").await?;
    assert_eq!(import_after.resource_version(), ready.resource_version());

    // A deleted Secret is recreated.
    secrets(fed, ns)
        .delete("reader-m1-kubeconfig", &DeleteParams::default())
        .await?;
    wait_for(T, "the Secret recreated", || async {
        let s = secrets(fed, ns)
            .get_opt("reader-m1-kubeconfig")
            .await?
            .context("gone")?;
        ensure!(s.uid() != secret.uid(), "still the old Secret");
        Ok(())
    })
    .await?;

    // A deleted import takes its Secret with it (the host's garbage collector).
    imports(fed, ns)
        .delete("reader-m1", &DeleteParams::default())
        .await?;
    wait_for(T, "the Secret garbage-collected", || async {
        ensure!(
            secrets(fed, ns)
                .get_opt("reader-m1-kubeconfig")
                .await?
                .is_none(),
            "still there"
        );
        Ok(())
    })
    .await?;
    Ok(())
}

async fn tokens_are_refreshed_at_the_refresh_point_and_failures_are_reported(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    setup(fed, ns).await?;

    // An unknown cluster and a missing ServiceAccount: reasons, and no Secret.
    import(fed, ns, "nowhere", "no-such-cluster", "reader", None).await?;
    wait_reason(fed, ns, "nowhere", "ClusterNotFound").await?;
    import(fed, ns, "missing", "member1", "no-such-sa", None).await?;
    let missing = wait_reason(fed, ns, "missing", "ServiceAccountNotFound").await?;
    ensure!(
        missing
            .status
            .as_ref()
            .and_then(|s| s.secret_name.clone())
            .is_none(),
        "no Secret for a failed import"
    );
    ensure!(
        secrets(fed, ns)
            .get_opt("missing-kubeconfig")
            .await?
            .is_none()
    );

    // 1 % of a 600 s lifetime: refreshed about every 6 s; the default 80 % is not.
    import(fed, ns, "fast", "member1", "reader", Some("0.01")).await?;
    import(fed, ns, "slow", "member1", "reader", None).await?;
    wait_reason(fed, ns, "fast", "TokenIssued").await?;
    wait_reason(fed, ns, "slow", "TokenIssued").await?;
    let fast = wait_secret(fed, ns, "fast-kubeconfig").await?;
    let slow = wait_secret(fed, ns, "slow-kubeconfig").await?;
    let first_token = value(&fast, "token")?;
    wait_for(T, "the fast import's token re-requested", || async {
        let s = secrets(fed, ns).get("fast-kubeconfig").await?;
        ensure!(value(&s, "token")? != first_token, "same token");
        ensure!(
            s.annotations().get(EXPIRATION_ANNOTATION)
                != fast.annotations().get(EXPIRATION_ANNOTATION)
                || s.resource_version() != fast.resource_version(),
            "same Secret"
        );
        Ok(())
    })
    .await?;
    let slow_now = secrets(fed, ns).get("slow-kubeconfig").await?;
    assert_eq!(
        slow_now.resource_version(),
        slow.resource_version(),
        "a token before its refresh point is not re-requested"
    );

    // The remote ServiceAccount deleted: the next refresh fails with the reason, the
    // previous (still valid) token stays in the Secret, and the Event carries no token.
    let kept = secrets(fed, ns).get("fast-kubeconfig").await?;
    Api::<ServiceAccount>::namespaced(fed.members[0].clone(), ns)
        .delete("reader", &DeleteParams::default())
        .await?;
    let failed = wait_reason(fed, ns, "fast", "ServiceAccountNotFound").await?;
    let condition = failed
        .status
        .as_ref()
        .and_then(|s| s.ready())
        .context("Ready")?;
    assert_eq!(condition.status, "False");
    assert!(
        condition
            .message
            .as_deref()
            .is_some_and(|m| m.contains("keeps the previous token")),
        "{condition:?}"
    );
    let still = secrets(fed, ns).get("fast-kubeconfig").await?;
    assert_eq!(value(&still, "token")?, value(&kept, "token")?);
    let events = wait_for(T, "a ServiceAccountNotFound Event", || async {
        let e = events_about(&fed.host, ns, "fast", "ServiceAccountNotFound").await?;
        ensure!(!e.is_empty(), "no Event yet");
        Ok(e)
    })
    .await?;
    let token = value(&still, "token")?;
    for e in events {
        assert!(
            !e.note.unwrap_or_default().contains(&token),
            "a token in an Event"
        );
    }
    let metrics = fed
        .control_plane
        .as_ref()
        .context("control plane")?
        .metrics
        .encode();
    for family in [
        "flotilla_serviceaccountimport_reconciles_total{reason=\"ServiceAccountNotFound\"}",
        "flotilla_serviceaccountimport_reconciles_total{reason=\"ClusterNotFound\"}",
        "flotilla_serviceaccountimport_tokens_issued_total",
    ] {
        assert!(
            metrics.contains(family),
            "{family} missing from the metrics"
        );
    }
    assert!(!metrics.contains(&token), "a token in the metrics");
    Ok(())
}
