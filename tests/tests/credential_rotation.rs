//! Rotating member credentials on real clusters: `join` gives the host a bound token
//! (TokenRequest) and never a non-expiring one; the control plane renews it (here every
//! few seconds, `--credential-renewal-interval`) while objects propagate; the credential
//! may request tokens of its own ServiceAccount only; a renewal blocked by a black-holed
//! member is reported on the KubeFedCluster and recovers; a cluster joined with a
//! long-lived token moves to rotation with `join --rotate-credentials` without a write to
//! any propagated object; deleting the member ServiceAccount revokes the credential; and a
//! KubeFedCluster whose credential comes from an exec plugin (a script the test writes)
//! propagates, while a plugin outside `--exec-plugin-dir` is refused.

use std::{collections::BTreeMap, path::Path, sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster};
use flotilla_controllers::{
    join::{JoinOptions, join},
    manager::{ControlPlane, Options},
    metrics::Metrics,
};
use flotilla_core::credential::{self, Rotation};
use flotilla_localenv::{FaultMode, FaultProxy};
use flotilla_tests::{
    EnvOptions,
    federation::{
        Federation, apply, bootstrap, federated, federated_namespace, install_host, seeded_env,
    },
    init_tracing, wait_for,
};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::{ConfigMap, Event, Namespace, Secret, ServiceAccount},
    rbac::v1::Role,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// The renewal interval of the test's control plane.
const RENEWAL: Duration = Duration::from_secs(3);
pub(crate) const NS: &str = "rotation";

/// The host Secret of `cluster`: its token and its rotation, if any.
pub(crate) async fn held(
    host: &Client,
    cluster: &str,
) -> anyhow::Result<(String, Option<Rotation>)> {
    let secrets: Api<Secret> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let secret = secrets.get(&format!("{cluster}-token")).await?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .context("no token in the host Secret")?;
    let rotation = Rotation::from_annotations(secret.annotations())?;
    Ok((String::from_utf8(token.0.clone())?, rotation))
}

/// A client of member `index` authenticating with `token`.
pub(crate) fn as_token(fed: &Federation, index: usize, token: &str) -> anyhow::Result<Client> {
    let mut config = fed.env.members()[index].kube_config();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    Ok(Client::try_from(config)?)
}

/// Whether member `index` accepts `token` (any answer but 401 Unauthorized).
pub(crate) async fn accepted(fed: &Federation, index: usize, token: &str) -> anyhow::Result<bool> {
    let api: Api<Namespace> = Api::all(as_token(fed, index, token)?);
    match api.get_opt("default").await {
        Err(kube::Error::Api(s)) if s.code == 401 => Ok(false),
        _ => Ok(true),
    }
}

/// `(status, reason)` of condition `type_` on `cluster`'s KubeFedCluster.
pub(crate) async fn condition(
    host: &Client,
    cluster: &str,
    type_: &str,
) -> anyhow::Result<(String, String)> {
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let kfc = kfcs.get(cluster).await?;
    let c = kfc
        .status
        .as_ref()
        .and_then(|s| s.condition(type_))
        .with_context(|| format!("no {type_} condition on {cluster}"))?;
    Ok((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

async fn wait_condition(
    host: &Client,
    cluster: &str,
    type_: &str,
    expected: (&str, &str),
) -> anyhow::Result<()> {
    let what = format!("{cluster} {type_}={} ({})", expected.0, expected.1);
    wait_for(T, &what, || async {
        let (status, reason) = condition(host, cluster, type_).await?;
        ensure!(
            (status.as_str(), reason.as_str()) == expected,
            "{status} ({reason})"
        );
        Ok(())
    })
    .await
}

/// Host: CRDs and config; member1 joined directly, member2 through a fault proxy, both
/// as `flotilla join` does; the control plane renews every [`RENEWAL`].
async fn rotating_federation(plugins: &Path) -> anyhow::Result<(Federation, FaultProxy)> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(2), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let member1 = boot.join(&host, &env.members()[0]).await?;
    let m2 = &env.members()[1];
    let proxy = FaultProxy::for_cluster(m2).await?;
    let member2 = m2.client().await?;
    let mut opts = JoinOptions::new(m2.name(), &proxy.url());
    opts.ca_pem = Some(m2.ca_pem().to_string());
    opts.labels.insert("name".into(), m2.name().into());
    join(&host, &member2, &opts).await?;
    let options = Options {
        credential_renewal_interval: Some(RENEWAL),
        exec_plugin_dir: Some(plugins.to_path_buf()),
        ..Options::new(DEFAULT_NAMESPACE)
    };
    let cp = ControlPlane::start_with(host.clone(), &options, Arc::new(Metrics::new()));
    let fed = Federation {
        control_plane: Some(cp),
        host,
        members: vec![member1, member2],
        env,
    };
    for cluster in ["member1", "member2"] {
        wait_condition(&fed.host, cluster, "Ready", ("True", "ClusterReady")).await?;
    }
    Ok((fed, proxy))
}

fn metrics(fed: &Federation) -> String {
    fed.control_plane
        .as_ref()
        .map(|cp| cp.metrics.encode())
        .unwrap_or_default()
}

/// Applies FederatedConfigMap `name` (data `k: value`) placed on every member.
pub(crate) async fn apply_fcm(fed: &Federation, name: &str, value: &str) -> anyhow::Result<()> {
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"data": {"k": value}}, "placement": {"clusterSelector": {}}}
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some(NS),
        &obj,
    )
    .await?;
    Ok(())
}

/// Waits until ConfigMap `name` in every member has `k: value`.
pub(crate) async fn wait_propagated(
    fed: &Federation,
    name: &str,
    value: &str,
) -> anyhow::Result<()> {
    for member in &fed.members {
        let cms: Api<ConfigMap> = Api::namespaced(member.clone(), NS);
        wait_for(T, &format!("{name}={value} propagated"), || async {
            let cm = cms.get(name).await?;
            let got = cm.data.and_then(|d| d.get("k").cloned());
            ensure!(got.as_deref() == Some(value), "{got:?}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn member_credentials_rotate_are_scoped_reported_migrated_and_revocable() -> anyhow::Result<()>
{
    init_tracing();
    let plugins = std::env::temp_dir().join(format!("flotilla-exec-{}", std::process::id()));
    std::fs::create_dir_all(&plugins)?;
    let (fed, proxy) = rotating_federation(&plugins).await?;
    join_issues_a_bound_token_and_no_token_secret(&fed).await?;
    tokens_rotate_while_objects_propagate(&fed).await?;
    the_credential_requests_tokens_of_its_own_service_account_only(&fed).await?;
    a_blocked_renewal_is_reported_and_recovers(&fed, &proxy).await?;
    a_long_lived_token_moves_to_rotation_without_member_writes(&fed).await?;
    deleting_the_service_account_revokes_the_credential(&fed).await?;
    an_exec_plugin_gives_the_credential(&fed, &plugins).await?;
    std::fs::remove_dir_all(&plugins)?;
    Ok(())
}

async fn join_issues_a_bound_token_and_no_token_secret(fed: &Federation) -> anyhow::Result<()> {
    for (i, cluster) in ["member1", "member2"].iter().enumerate() {
        let (_, rotation) = held(&fed.host, cluster).await?;
        let rotation = rotation.context("the host Secret has no rotation annotations")?;
        let life = rotation
            .expires_at
            .duration_since(rotation.issued_at)
            .as_secs();
        ensure!(
            (3500..=3700).contains(&life),
            "{cluster}'s token lives {life}s, not the default hour"
        );
        let sa = format!("{cluster}-host");
        ensure!(rotation.service_account == sa, "{rotation:?}");
        let secrets: Api<Secret> = Api::namespaced(fed.members[i].clone(), DEFAULT_NAMESPACE);
        ensure!(
            secrets.get_opt(&format!("{sa}-token")).await?.is_none(),
            "join created a long-lived token Secret"
        );
    }
    Ok(())
}

async fn tokens_rotate_while_objects_propagate(fed: &Federation) -> anyhow::Result<()> {
    federated_namespace(fed, NS).await?;
    let (first, _) = held(&fed.host, "member1").await?;
    let mut seen = vec![first.clone()];
    let mut round = 0;
    while seen.len() < 4 {
        round += 1;
        ensure!(round <= 40, "only {} tokens in {round} rounds", seen.len());
        apply_fcm(fed, "rotating", &round.to_string()).await?;
        wait_propagated(fed, "rotating", &round.to_string()).await?;
        let (token, _) = held(&fed.host, "member1").await?;
        if !seen.contains(&token) {
            seen.push(token);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "member1 tokens seen in {round} propagation rounds: {}",
        seen.len()
    );
    for cluster in ["member1", "member2"] {
        wait_condition(
            &fed.host,
            cluster,
            credential::CONDITION,
            ("True", "TokenRenewed"),
        )
        .await?;
        let (status, reason) = condition(&fed.host, cluster, "Ready").await?;
        ensure!(
            status == "True",
            "{cluster} not Ready during rotation: {reason}"
        );
    }
    let text = metrics(fed);
    ensure!(
        !text.contains("result=\"Failed\""),
        "a renewal failed while nothing was cut"
    );
    ensure!(
        !text.contains(&first) && !text.contains(&seen[seen.len() - 1]),
        "a token in the metrics"
    );
    // Bound tokens are not revoked by newer ones: the first stays valid until it expires
    // or the ServiceAccount is deleted (the last step of this test).
    ensure!(
        accepted(fed, 0, &first).await?,
        "an earlier token refused early"
    );
    Ok(())
}

/// Whether the member's authorizer lets `user` create a token of `namespace/sa`.
async fn may_request_token(member: &Client, user: &str, sa: &str) -> anyhow::Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{DEFAULT_NAMESPACE}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(DEFAULT_NAMESPACE.into()),
                verb: Some("create".into()),
                resource: Some("serviceaccounts".into()),
                subresource: Some("token".into()),
                name: Some(sa.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(member.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn the_credential_requests_tokens_of_its_own_service_account_only(
    fed: &Federation,
) -> anyhow::Result<()> {
    let member = &fed.members[0];
    let user = format!("system:serviceaccount:{DEFAULT_NAMESPACE}:member1-host");
    ensure!(
        may_request_token(member, &user, "member1-host").await?,
        "own SA refused"
    );
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), DEFAULT_NAMESPACE);
    let other = "someone-else";
    sas.patch(
        other,
        &PatchParams::apply("credential-rotation-test"),
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": other}}),
        ),
    )
    .await?;
    ensure!(
        !may_request_token(member, &user, other).await?,
        "another SA allowed"
    );
    // And for real, with the credential the control plane holds.
    let (token, _) = held(&fed.host, "member1").await?;
    let as_member: Api<ServiceAccount> =
        Api::namespaced(as_token(fed, 0, &token)?, DEFAULT_NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    let refused = as_member
        .create_token_request(other, &PostParams::default(), &request)
        .await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "a token of another SA was not refused with 403: {:?}",
        refused.as_ref().map(|_| "issued")
    );
    as_member
        .create_token_request("member1-host", &PostParams::default(), &request)
        .await
        .context("its own token refused")?;
    Ok(())
}

async fn a_blocked_renewal_is_reported_and_recovers(
    fed: &Federation,
    proxy: &FaultProxy,
) -> anyhow::Result<()> {
    proxy.set_mode(FaultMode::BlackHole);
    let failing = ("False", "TokenRenewalFailed");
    let reported = wait_condition(&fed.host, "member2", credential::CONDITION, failing).await;
    let events: Api<Event> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let event = wait_for(T, "a TokenRenewalFailed Event on member2", || async {
        let list = events.list(&ListParams::default()).await?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("TokenRenewalFailed")
                    && e.involved_object.name.as_deref() == Some("member2")
            })
            .context("none yet")
    })
    .await;
    let failed = metrics(fed).lines().any(|l| {
        l.contains("credential_renewals_total") && l.contains("member2") && l.contains("Failed")
    });
    proxy.set_mode(FaultMode::PassThrough);
    reported?;
    let event = event?;
    let (token, _) = held(&fed.host, "member2").await?;
    ensure!(
        !event.message.unwrap_or_default().contains(&token),
        "the token in an Event"
    );
    ensure!(failed, "no failed renewal counted");
    wait_condition(
        &fed.host,
        "member2",
        credential::CONDITION,
        ("True", "TokenRenewed"),
    )
    .await?;
    wait_condition(&fed.host, "member2", "Ready", ("True", "ClusterReady")).await
}

/// Member1 as a cluster joined before rotation: a long-lived token Secret in the member,
/// its token in the host Secret without rotation annotations, no renewal Role.
async fn downgrade_to_long_lived(fed: &Federation) -> anyhow::Result<String> {
    let member = &fed.members[0];
    let secrets: Api<Secret> = Api::namespaced(member.clone(), DEFAULT_NAMESPACE);
    let body = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "member1-host-token",
                     "annotations": {"kubernetes.io/service-account.name": "member1-host"}},
    });
    secrets
        .patch(
            "member1-host-token",
            &PatchParams::apply("old-join"),
            &Patch::Apply(body),
        )
        .await?;
    let legacy = wait_for(T, "the legacy token issued", || async {
        let s = secrets.get("member1-host-token").await?;
        let t = s
            .data
            .and_then(|d| d.get("token").cloned())
            .context("not yet")?;
        Ok(String::from_utf8(t.0)?)
    })
    .await?;
    let roles: Api<Role> = Api::namespaced(member.clone(), DEFAULT_NAMESPACE);
    roles
        .delete("member1-host-token-renewal", &DeleteParams::default())
        .await?;
    let mut annotations = serde_json::Map::new();
    for key in credential::ANNOTATIONS {
        annotations.insert(key.to_string(), serde_json::Value::Null);
    }
    let host_secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&legacy)
    };
    host_secrets
        .patch(
            "member1-token",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": annotations}, "data": {"token": encoded}}),
            ),
        )
        .await?;
    Ok(legacy)
}

/// `(name, resourceVersion)` of every ConfigMap and the namespace of the test in member1.
async fn member1_versions(fed: &Federation) -> anyhow::Result<BTreeMap<String, String>> {
    let cms: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), NS);
    let mut versions: BTreeMap<String, String> = cms
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|c| (c.name_any(), c.resource_version().unwrap_or_default()))
        .collect();
    let nss: Api<Namespace> = Api::all(fed.members[0].clone());
    let ns = nss.get(NS).await?;
    versions.insert(
        format!("namespace/{NS}"),
        ns.resource_version().unwrap_or_default(),
    );
    Ok(versions)
}

async fn a_long_lived_token_moves_to_rotation_without_member_writes(
    fed: &Federation,
) -> anyhow::Result<()> {
    let legacy = downgrade_to_long_lived(fed).await?;
    // The control plane runs on the long-lived token, and does not renew it.
    apply_fcm(fed, "before-migration", "v").await?;
    wait_propagated(fed, "before-migration", "v").await?;
    wait_condition(&fed.host, "member1", "Ready", ("True", "ClusterReady")).await?;
    tokio::time::sleep(RENEWAL * 2).await;
    ensure!(
        held(&fed.host, "member1").await?.0 == legacy,
        "a long-lived token was renewed"
    );
    let before = member1_versions(fed).await?;

    let args = [
        "join",
        "member1",
        "--cluster-context",
        "member1",
        "--rotate-credentials",
    ];
    let out = flotilla_tests::cli::run_ok(fed, &args).await?;
    ensure!(
        out.contains("holds a rotating token")
            && out.contains("long-lived token Secret was deleted"),
        "{out}"
    );
    wait_for(T, "the legacy token refused", || async {
        ensure!(!accepted(fed, 0, &legacy).await?, "still accepted");
        Ok(())
    })
    .await?;
    // Renewed by the control plane since the migration: it holds and uses the new token.
    let (migrated, _) = held(&fed.host, "member1").await?;
    wait_for(T, "a renewal after the migration", || async {
        let (now, rotation) = held(&fed.host, "member1").await?;
        ensure!(rotation.is_some() && now != migrated, "not yet");
        Ok(())
    })
    .await?;
    wait_condition(&fed.host, "member1", "Ready", ("True", "ClusterReady")).await?;
    tokio::time::sleep(RENEWAL * 2).await;
    let after = member1_versions(fed).await?;
    ensure!(
        before == after,
        "member objects written by the migration:\n{before:?}\n{after:?}"
    );
    eprintln!("migration: {} member objects, 0 writes", before.len());
    // Objects still propagate.
    apply_fcm(fed, "after-migration", "v").await?;
    wait_propagated(fed, "after-migration", "v").await
}

async fn deleting_the_service_account_revokes_the_credential(
    fed: &Federation,
) -> anyhow::Result<()> {
    let (token, _) = held(&fed.host, "member1").await?;
    let sas: Api<ServiceAccount> = Api::namespaced(fed.members[0].clone(), DEFAULT_NAMESPACE);
    sas.delete("member1-host", &DeleteParams::default()).await?;
    wait_for(T, "the revoked token refused", || async {
        ensure!(!accepted(fed, 0, &token).await?, "still accepted");
        Ok(())
    })
    .await?;
    wait_condition(
        &fed.host,
        "member1",
        "Ready",
        ("False", "ClusterUnauthorized"),
    )
    .await?;
    wait_condition(
        &fed.host,
        "member1",
        credential::CONDITION,
        ("False", "TokenRenewalFailed"),
    )
    .await?;
    // Joining again issues a new ServiceAccount and token.
    let m1 = &fed.env.members()[0];
    let mut opts = JoinOptions::new("member1", m1.server());
    opts.ca_pem = Some(m1.ca_pem().to_string());
    opts.labels.insert("name".into(), "member1".into());
    join(&fed.host, &fed.members[0], &opts).await?;
    wait_condition(&fed.host, "member1", "Ready", ("True", "ClusterReady")).await?;
    wait_condition(
        &fed.host,
        "member1",
        credential::CONDITION,
        ("True", "TokenRenewed"),
    )
    .await
}

/// Writes an exec credential plugin printing `token` and counting its runs in `runs`.
pub(crate) fn write_plugin(dir: &Path, token: &str) -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("member1-credential");
    let runs = dir.join("runs");
    let script = format!(
        "#!/bin/sh\necho run >> {runs}\nprintf '%s' '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"}}}}'\n",
        runs = runs.display()
    );
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
    Ok(path)
}

/// Member1 registered again, as `member1-exec`, its credential from an exec plugin; a
/// plugin outside the plugin directory is refused as a malformed configuration.
async fn an_exec_plugin_gives_the_credential(
    fed: &Federation,
    plugins: &Path,
) -> anyhow::Result<()> {
    let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.delete("member1", &DeleteParams::default()).await?;
    let m1 = &fed.env.members()[0];
    let plugin = write_plugin(plugins, m1.admin_token())?;
    let ca = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(m1.ca_pem())
    };
    let kfc = |name: &str, command: &str| {
        json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
            "metadata": {"name": name, "namespace": DEFAULT_NAMESPACE},
            "spec": {"apiEndpoint": m1.server(), "caBundle": ca,
                     "exec": {"command": command}},
        })
    };
    let params = PatchParams::apply("credential-rotation-test");
    let command = plugin.display().to_string();
    kfcs.patch(
        "member1-exec",
        &params,
        &Patch::Apply(kfc("member1-exec", &command)),
    )
    .await?;
    kfcs.patch(
        "outside",
        &params,
        &Patch::Apply(kfc("outside", "/bin/echo")),
    )
    .await?;
    wait_condition(&fed.host, "member1-exec", "Ready", ("True", "ClusterReady")).await?;
    let malformed = ("True", "ClusterConfigMalformed");
    wait_condition(&fed.host, "outside", "ConfigMalformed", malformed).await?;
    apply_fcm(fed, "from-exec", "v").await?;
    wait_propagated(fed, "from-exec", "v").await?;
    let runs = std::fs::read_to_string(plugins.join("runs"))?;
    ensure!(runs.lines().count() >= 1, "the plugin never ran");
    let kfc = kfcs.get("member1-exec").await?;
    let status = serde_json::to_string(&kfc.status)?;
    ensure!(
        !status.contains(m1.admin_token()),
        "the token in the status"
    );
    kfcs.delete("outside", &DeleteParams::default()).await?;
    Ok(())
}
