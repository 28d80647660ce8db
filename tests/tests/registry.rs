//! The cluster registry on real clusters: members joined the way `kubefedctl join` does
//! become Ready with their version (one whose token Secret ends in a newline too), a stopped member goes Offline without disturbing the
//! others, broken credentials and configurations are reported precisely and recover when
//! fixed, and multi-cluster watches follow member readiness.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_api::core::{ClusterHealthCheckConfig, LocalSecretReference, condition, reason};
use flotilla_api::{
    DEFAULT_NAMESPACE, KUBEFED_CONFIG_NAME, KubeFedCluster, KubeFedClusterSpec, KubeFedConfig,
    KubeFedConfigSpec, crdgen,
};
use flotilla_controllers::install;
use flotilla_controllers::metrics::Metrics;
use flotilla_controllers::multicluster::{ClusterSet, MemberEvent, MemberWatch};
use flotilla_controllers::registry::{self, RegistryHandle};
use flotilla_tests::assert::events_about;
use flotilla_tests::objects::{config_map, create_namespace, meta, string_map};
use flotilla_tests::{Cluster, LocalEnv, env, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

const NS: &str = DEFAULT_NAMESPACE;
/// Health settings of every test: period 1 s, failureThreshold 3, timeout 1 s.
const PERIOD: Duration = Duration::from_secs(1);
const FAILURE_THRESHOLD: u32 = 3;
/// Scheduling slack on a shared two-core machine.
const SLACK: Duration = Duration::from_secs(8);

// ---------------------------------------------------------------------------------------
// Helpers: CRDs, configuration, `kubefedctl join`, conditions.

/// Base64 as Kubernetes writes `[]byte` fields.
fn base64(bytes: &[u8]) -> anyhow::Result<String> {
    match serde_json::to_value(ByteString(bytes.to_vec()))? {
        serde_json::Value::String(s) => Ok(s),
        other => anyhow::bail!("ByteString serialized as {other}"),
    }
}

/// Installs the generated KubeFedCluster and KubeFedConfig CRDs (only the registry's, so
/// this test does not depend on the other core CRDs) and waits until each is Established.
async fn install_core_crds(host: &Client) -> anyhow::Result<()> {
    let wanted = [
        "kubefedclusters.core.kubefed.io",
        "kubefedconfigs.core.kubefed.io",
    ];
    let registry_crds: Vec<CustomResourceDefinition> = crdgen::core_crds()
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| wanted.contains(&n))
        })
        .collect();
    anyhow::ensure!(registry_crds.len() == wanted.len(), "core CRDs missing");
    install::install_crds(
        host,
        &registry_crds,
        "registry-test",
        Duration::from_secs(30),
    )
    .await?;
    Ok(())
}

/// Writes the KubeFedConfig singleton with the tests' short health period.
async fn apply_fast_health_config(host: &Client) -> anyhow::Result<()> {
    let mut spec = KubeFedConfigSpec::with_defaults();
    spec.cluster_health_check = Some(ClusterHealthCheckConfig {
        period: Some("1s".into()),
        failure_threshold: Some(i64::from(FAILURE_THRESHOLD)),
        success_threshold: Some(1),
        timeout: Some("1s".into()),
    });
    let api: Api<KubeFedConfig> = Api::namespaced(host.clone(), NS);
    api.create(
        &PostParams::default(),
        &KubeFedConfig {
            metadata: meta(KUBEFED_CONFIG_NAME, Some(NS)),
            spec,
        },
    )
    .await
    .context("creating the KubeFedConfig")?;
    Ok(())
}

/// A host with the CRDs and the fast health configuration, and a started registry.
struct Plane {
    host: Client,
    set: ClusterSet,
    metrics: Arc<Metrics>,
    handle: RegistryHandle,
}

async fn start_plane(env: &LocalEnv) -> anyhow::Result<Plane> {
    let host = env.host().client().await?;
    install_core_crds(&host).await?;
    create_namespace(&host, NS).await?;
    apply_fast_health_config(&host).await?;
    let set = ClusterSet::new();
    let metrics = Arc::new(Metrics::new());
    let handle = registry::start(host.clone(), NS, set.clone(), metrics.clone());
    Ok(Plane {
        host,
        set,
        metrics,
        handle,
    })
}

/// What `kubefedctl join` sets up in a member: a namespace, a service account with a
/// `service-account-token` Secret (filled in by the member's controller-manager), and a
/// ClusterRole with every verb on everything plus `/healthz` and `/version`. Returns the
/// service account's token. A secret: never print it.
async fn member_service_account_token(member: &Cluster) -> anyhow::Result<String> {
    let client = member.client().await?;
    let sa_name = format!("{}-host", member.name());
    create_namespace(&client, NS).await?;
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta(&sa_name, Some(NS)),
                ..ServiceAccount::default()
            },
        )
        .await
        .context("creating the service account")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let token_secret = format!("{sa_name}-token");
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    annotations: Some(BTreeMap::from([(
                        "kubernetes.io/service-account.name".to_owned(),
                        sa_name.clone(),
                    )])),
                    ..meta(&token_secret, Some(NS))
                },
                type_: Some("kubernetes.io/service-account-token".into()),
                ..Secret::default()
            },
        )
        .await
        .context("creating the service-account-token Secret")?;
    let role_name = format!("kubefed-controller-manager:{sa_name}");
    Api::<ClusterRole>::all(client.clone())
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: meta(&role_name, None),
                rules: Some(vec![
                    PolicyRule {
                        api_groups: Some(vec!["*".into()]),
                        resources: Some(vec!["*".into()]),
                        verbs: vec!["*".into()],
                        ..PolicyRule::default()
                    },
                    PolicyRule {
                        non_resource_urls: Some(vec!["/healthz".into(), "/version".into()]),
                        verbs: vec!["get".into()],
                        ..PolicyRule::default()
                    },
                ]),
                ..ClusterRole::default()
            },
        )
        .await
        .context("creating the ClusterRole")?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta(&role_name, None),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: role_name.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: sa_name.clone(),
                    namespace: Some(NS.into()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .context("creating the ClusterRoleBinding")?;
    wait_for(
        Duration::from_secs(60),
        "the member's controller-manager to fill in the token",
        || async {
            let secret = secrets.get(&token_secret).await?;
            let token = secret
                .data
                .and_then(|d| d.get("token").cloned())
                .context("no token yet")?;
            Ok(String::from_utf8(token.0)?)
        },
    )
    .await
}

/// Writes (or overwrites) the host Secret holding `token` under key `token`.
async fn put_token_secret(host: &Client, name: &str, token: &str) -> anyhow::Result<()> {
    let secret = Secret {
        metadata: meta(name, Some(NS)),
        data: Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(host.clone(), NS)
        .patch(
            name,
            &PatchParams::apply("registry-test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .with_context(|| format!("writing Secret {name}"))?;
    Ok(())
}

/// Creates a KubeFedCluster `name` for `member` using the host Secret `secret`.
async fn create_cluster(
    host: &Client,
    name: &str,
    member: &Cluster,
    secret: &str,
    ca_bundle: String,
    labels: BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let cluster = KubeFedCluster {
        metadata: ObjectMeta {
            labels: Some(labels),
            ..meta(name, Some(NS))
        },
        spec: KubeFedClusterSpec {
            api_endpoint: member.server().to_owned(),
            ca_bundle: Some(ca_bundle),
            secret_ref: LocalSecretReference {
                name: secret.to_owned(),
            },
            ..KubeFedClusterSpec::default()
        },
        status: None,
    };
    Api::<KubeFedCluster>::namespaced(host.clone(), NS)
        .create(&PostParams::default(), &cluster)
        .await
        .with_context(|| format!("creating KubeFedCluster {name}"))?;
    Ok(())
}

/// `kubefedctl join`: member-side service account and RBAC, host Secret and KubeFedCluster
/// (named after the member, with `labels`). Returns the member token (never print it).
async fn join(
    host: &Client,
    member: &Cluster,
    labels: BTreeMap<String, String>,
) -> anyhow::Result<String> {
    join_with_token_suffix(host, member, labels, "").await
}

/// [`join`], the Secret's token followed by `suffix` (a hand-written Secret often ends in
/// a newline).
async fn join_with_token_suffix(
    host: &Client,
    member: &Cluster,
    labels: BTreeMap<String, String>,
    suffix: &str,
) -> anyhow::Result<String> {
    let token = member_service_account_token(member).await?;
    let secret = format!("{}-secret", member.name());
    put_token_secret(host, &secret, &format!("{token}{suffix}")).await?;
    create_cluster(
        host,
        member.name(),
        member,
        &secret,
        base64(member.ca_pem().as_bytes())?,
        labels,
    )
    .await?;
    Ok(token)
}

/// The KubeFedCluster's condition of `type_` as (status, reason, message).
async fn condition_of(
    host: &Client,
    name: &str,
    type_: &str,
) -> anyhow::Result<(String, String, String)> {
    let cluster = Api::<KubeFedCluster>::namespaced(host.clone(), NS)
        .get(name)
        .await?;
    let status = cluster.status.context("no status yet")?;
    let c = status
        .condition(type_)
        .with_context(|| format!("no {type_} condition in {:?}", status.conditions))?;
    Ok((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// Waits until the condition has `status` and `reason`; returns its message.
async fn await_condition(
    host: &Client,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    wait_for(
        timeout,
        &format!("{name}: {type_}={status} ({reason})"),
        || async {
            let (s, r, m) = condition_of(host, name, type_).await?;
            anyhow::ensure!(s == status && r == reason, "{type_}={s} ({r}): {m}");
            Ok(m)
        },
    )
    .await
}

/// Waits until the cluster is Ready=True (ClusterReady).
async fn await_ready(host: &Client, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let (ready, cluster_ready) = (condition::READY, reason::CLUSTER_READY);
    await_condition(host, name, ready, "True", cluster_ready, timeout)
        .await
        .map(drop)
}

// ---------------------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn joined_members_become_ready_with_their_kubernetes_version_and_labels() -> anyhow::Result<()>
{
    let env = env(2).await;
    let plane = start_plane(&env).await?;
    for (i, member) in env.members().iter().enumerate() {
        // member2's Secret ends in a newline, which the token must lose (as client-go's).
        let suffix = if i == 1 { "\n" } else { "" };
        let labels = string_map(&[("region", member.name())]);
        join_with_token_suffix(&plane.host, member, labels, suffix).await?;
    }

    for member in env.members() {
        await_ready(&plane.host, member.name(), Duration::from_secs(30)).await?;
        let version = wait_for(Duration::from_secs(10), "kubernetesVersion", || async {
            let status = Api::<KubeFedCluster>::namespaced(plane.host.clone(), NS)
                .get(member.name())
                .await?
                .status
                .unwrap_or_default();
            status.kubernetes_version.context("no version yet")
        })
        .await?;
        assert_eq!(version, flotilla_localenv::KUBE_VERSION);
        let (offline, ..) = condition_of(&plane.host, member.name(), condition::OFFLINE).await?;
        assert_eq!(offline, "False");
    }

    let ready: Vec<String> = plane.set.ready().into_iter().map(|c| c.name).collect();
    assert_eq!(ready, ["member1", "member2"]);
    let member1 = plane.set.get("member1").context("member1 registered")?;
    assert_eq!(member1.labels, string_map(&[("region", "member1")]));
    let text = plane.metrics.encode();
    assert!(text.contains("flotilla_clusters 2"), "{text}");
    assert!(text.contains("flotilla_ready_clusters 2"), "{text}");
    assert!(
        text.contains("flotilla_cluster_probe_duration_seconds_count{cluster=\"member1\"}"),
        "{text}"
    );

    // A steady state writes nothing: the status stays at the same resourceVersion for
    // several periods.
    let kfcs: Api<KubeFedCluster> = Api::namespaced(plane.host.clone(), NS);
    let before = kfcs.get("member1").await?.metadata.resource_version;
    tokio::time::sleep(PERIOD * 4).await;
    let after = kfcs.get("member1").await?.metadata.resource_version;
    assert_eq!(before, after, "an unchanged status was written again");

    // The configuration is followed without a restart.
    let config = plane.handle.config();
    wait_for(Duration::from_secs(10), "the 1s period in effect", || {
        let config = config.clone();
        async move {
            anyhow::ensure!(config.borrow().health_period == PERIOD);
            Ok(())
        }
    })
    .await?;
    Api::<KubeFedConfig>::namespaced(plane.host.clone(), NS)
        .patch(
            KUBEFED_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterHealthCheck": {"period": "2s"}}})),
        )
        .await?;
    wait_for(Duration::from_secs(10), "the 2s period in effect", || {
        let config = config.clone();
        async move {
            anyhow::ensure!(config.borrow().health_period == Duration::from_secs(2));
            Ok(())
        }
    })
    .await?;

    // Deleting a KubeFedCluster removes the cluster from the set.
    kfcs.delete("member2", &Default::default()).await?;
    wait_for(Duration::from_secs(10), "member2 removed", || async {
        anyhow::ensure!(plane.set.get("member2").is_none(), "still registered");
        Ok(())
    })
    .await?;

    plane.handle.shutdown().await;
    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_stopped_member_goes_offline_and_comes_back_while_the_other_stays_ready()
-> anyhow::Result<()> {
    let env = env(2).await;
    let plane = start_plane(&env).await?;
    for member in env.members() {
        join(&plane.host, member, BTreeMap::new()).await?;
    }
    for member in env.members() {
        await_ready(&plane.host, member.name(), Duration::from_secs(30)).await?;
    }

    // Watch member2 the whole time: it must never turn unready, in the set or in its status.
    let watcher_host = plane.host.clone();
    let watcher_set = plane.set.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let member2_watch = tokio::spawn(async move {
        let mut checks = 0u32;
        loop {
            let in_set = watcher_set.get("member2").is_some_and(|c| c.ready);
            anyhow::ensure!(in_set, "member2 turned unready in the ClusterSet");
            let (ready, reason, message) =
                condition_of(&watcher_host, "member2", condition::READY).await?;
            anyhow::ensure!(
                ready == "True",
                "member2 turned Ready={ready} ({reason}): {message}"
            );
            checks += 1;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = &mut stop_rx => return Ok(checks),
            }
        }
    });

    env.stop_apiserver("member1").await?;
    let stopped = Instant::now();
    let budget = PERIOD * FAILURE_THRESHOLD + PERIOD + SLACK;
    let message = await_condition(
        &plane.host,
        "member1",
        condition::OFFLINE,
        "True",
        reason::CLUSTER_NOT_REACHABLE,
        budget,
    )
    .await?;
    eprintln!(
        "member1 Offline {:?} after its apiserver stopped: {message}",
        stopped.elapsed()
    );
    let (ready, ..) = condition_of(&plane.host, "member1", condition::READY).await?;
    assert_eq!(ready, "False");
    assert!(!plane.set.get("member1").is_some_and(|c| c.ready));

    env.start_apiserver("member1").await?;
    await_ready(&plane.host, "member1", Duration::from_secs(20)).await?;
    let (offline, ..) = condition_of(&plane.host, "member1", condition::OFFLINE).await?;
    assert_eq!(offline, "False");
    assert!(plane.set.get("member1").is_some_and(|c| c.ready));

    let _ = stop_tx.send(());
    let checks = member2_watch.await??;
    assert!(checks > 5, "member2 was checked only {checks} times");

    plane.handle.shutdown().await;
    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn broken_credentials_and_configurations_are_reported_and_recover_once_fixed()
-> anyhow::Result<()> {
    let env = env(1).await;
    let plane = start_plane(&env).await?;
    let member = &env.members()[0];
    let host = &plane.host;
    // A healthy cluster next to the broken ones must stay Ready.
    let token = join(host, member, BTreeMap::new()).await?;
    let ca = base64(member.ca_pem().as_bytes())?;

    put_token_secret(host, "wrong-token-secret", "not-a-valid-token").await?;
    create_cluster(
        host,
        "wrong-token",
        member,
        "wrong-token-secret",
        ca.clone(),
        BTreeMap::new(),
    )
    .await?;
    put_token_secret(host, "garbage-ca-secret", &token).await?;
    create_cluster(
        host,
        "garbage-ca",
        member,
        "garbage-ca-secret",
        base64(b"this is not a certificate bundle")?,
        BTreeMap::new(),
    )
    .await?;
    create_cluster(
        host,
        "no-secret",
        member,
        "missing-secret",
        ca.clone(),
        BTreeMap::new(),
    )
    .await?;

    let timeout = Duration::from_secs(30);
    let message = await_condition(
        host,
        "wrong-token",
        condition::READY,
        "False",
        reason::CLUSTER_UNAUTHORIZED,
        timeout,
    )
    .await?;
    assert!(
        message.contains(&format!("Secret {NS}/wrong-token-secret")),
        "{message}"
    );
    let message = await_condition(
        host,
        "garbage-ca",
        condition::CONFIG_MALFORMED,
        "True",
        reason::CLUSTER_CONFIG_MALFORMED,
        timeout,
    )
    .await?;
    assert!(message.contains("spec.caBundle"), "{message}");
    let message = await_condition(
        host,
        "no-secret",
        condition::CONFIG_MALFORMED,
        "True",
        reason::CLUSTER_CONFIG_MALFORMED,
        timeout,
    )
    .await?;
    assert!(
        message.contains(&format!("{NS}/missing-secret")),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");
    await_ready(host, member.name(), timeout).await?;
    let ready: Vec<String> = plane.set.ready().into_iter().map(|c| c.name).collect();
    assert_eq!(ready, [member.name()]);

    // Each turn for the worse is an Event on the KubeFedCluster.
    wait_for(Duration::from_secs(10), "an Unauthorized Event", || async {
        let events = events_about(host, NS, "wrong-token", reason::CLUSTER_UNAUTHORIZED).await?;
        let found = events.iter().any(|e| e.type_.as_deref() == Some("Warning"));
        anyhow::ensure!(found, "no such Event yet");
        Ok(())
    })
    .await?;

    // Fixing the Secrets recovers both clusters without restarting anything.
    put_token_secret(host, "wrong-token-secret", &token).await?;
    put_token_secret(host, "missing-secret", &token).await?;
    for name in ["wrong-token", "no-secret"] {
        await_ready(host, name, timeout).await?;
    }
    let (malformed, ..) = condition_of(host, "no-secret", condition::CONFIG_MALFORMED)
        .await
        .map(Some)
        .or_else(|_| anyhow::Ok(None))?
        .unwrap_or_default();
    assert_ne!(malformed, "True", "ConfigMalformed cleared once fixed");
    // The broken CA is still reported, and nothing else was disturbed.
    let (malformed, ..) = condition_of(host, "garbage-ca", condition::CONFIG_MALFORMED).await?;
    assert_eq!(malformed, "True");
    let (ready, ..) = condition_of(host, member.name(), condition::READY).await?;
    assert_eq!(ready, "True");

    plane.handle.shutdown().await;
    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn member_watches_follow_member_readiness() -> anyhow::Result<()> {
    let env = env(2).await;
    let plane = start_plane(&env).await?;
    for member in env.members() {
        join(&plane.host, member, BTreeMap::new()).await?;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watch =
        MemberWatch::<ConfigMap>::start(plane.set.clone(), (), Some("app=x".into()), |_| {}, tx);

    for member in env.members() {
        let client = member.client().await?;
        create_namespace(&client, "watched").await?;
        let api: Api<ConfigMap> = Api::namespaced(client, "watched");
        api.create(
            &PostParams::default(),
            &config_map("labelled", &[("app", "x")], &[]),
        )
        .await?;
        api.create(
            &PostParams::default(),
            &config_map("other", &[("app", "y")], &[]),
        )
        .await?;
    }
    wait_for(
        Duration::from_secs(30),
        "both labelled ConfigMaps in the watch",
        || async {
            for member in ["member1", "member2"] {
                anyhow::ensure!(
                    watch.get(member, Some("watched"), "labelled").is_some(),
                    "{member} not seen yet"
                );
            }
            Ok(())
        },
    )
    .await?;
    assert!(watch.get("member1", Some("watched"), "other").is_none());
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        seen.push(event);
    }
    for member in ["member1", "member2"] {
        assert!(
            seen.contains(&MemberEvent::Object {
                cluster: member.into(),
                namespace: Some("watched".into()),
                name: "labelled".into(),
            }),
            "{seen:?}"
        );
    }

    env.stop_apiserver("member1").await?;
    wait_for(
        PERIOD * FAILURE_THRESHOLD + PERIOD + SLACK,
        "member1 to leave the watch",
        || async {
            anyhow::ensure!(
                watch.clusters() == ["member2"],
                "watching {:?}",
                watch.clusters()
            );
            Ok(())
        },
    )
    .await?;
    assert!(watch.get("member1", Some("watched"), "labelled").is_none());
    // member2 keeps being watched while member1 is down.
    let member2: Api<ConfigMap> = Api::namespaced(env.members()[1].client().await?, "watched");
    member2
        .create(
            &PostParams::default(),
            &config_map("while-down", &[("app", "x")], &[]),
        )
        .await?;
    wait_for(
        Duration::from_secs(10),
        "member2's new ConfigMap",
        || async {
            anyhow::ensure!(
                watch
                    .get("member2", Some("watched"), "while-down")
                    .is_some()
            );
            Ok(())
        },
    )
    .await?;

    env.start_apiserver("member1").await?;
    wait_for(
        Duration::from_secs(20),
        "member1 back in the watch",
        || async {
            let mut clusters = watch.clusters();
            clusters.sort();
            anyhow::ensure!(clusters == ["member1", "member2"], "watching {clusters:?}");
            anyhow::ensure!(watch.is_synced("member1"), "member1 not synced yet");
            anyhow::ensure!(watch.get("member1", Some("watched"), "labelled").is_some());
            Ok(())
        },
    )
    .await?;

    drop(watch);
    plane.handle.shutdown().await;
    env.shutdown().await?;
    Ok(())
}
