//! Member tokens that really expire, on real clusters (about 12 minutes: the TokenRequest
//! API grants no token shorter than 10 minutes, and the member's API server allows a
//! minute of clock skew past a token's expiry). Member1 is joined through a fault proxy
//! with the shortest lifetime; the control plane renews it every few seconds while objects
//! propagate; then the member is black-holed past the life of the last token: the
//! renewals fail and are reported, the cluster turns `Offline` / `ClusterCredentialExpired`
//! with `CredentialRenewed=False` / `TokenExpired`, and the member itself refuses both the
//! first token and the last one (401; the member is cut off until then, since its API
//! server takes a token for a minute past its expiry, and a member back within that minute
//! is simply renewed). When the member returns, the expired token still
//! gets nothing (the cluster stays expired, nothing is propagated to it); the documented
//! recovery, `flotilla join --rotate-credentials`, makes it Ready and propagation resumes.

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster};
use flotilla_controllers::{
    join::{JoinOptions, join, rotate_credentials},
    manager::{ControlPlane, Options},
    metrics::Metrics,
};
use flotilla_core::credential::{self, MIN_LIFETIME};
use flotilla_localenv::{FaultMode, FaultProxy};
use flotilla_tests::{
    EnvOptions,
    federation::{Federation, bootstrap, federated_namespace, install_host, seeded_env},
    init_tracing, wait_for,
};
use k8s_openapi::{api::core::v1::ConfigMap, jiff::Timestamp};
use kube::Api;

use crate::credential_rotation::{NS, accepted, apply_fcm, condition, held, wait_propagated};

/// The renewal interval of the test's control plane.
const RENEWAL: Duration = Duration::from_secs(3);
/// How long the member's API server still takes a token past its expiry (go-jose's
/// default leeway), plus slack for a loaded machine.
const SKEW: Duration = Duration::from_secs(120);

/// Host and member1, joined through a fault proxy with a 10-minute token; the control
/// plane renews every [`RENEWAL`].
async fn short_lived_federation() -> anyhow::Result<(Federation, FaultProxy, JoinOptions)> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let m1 = &env.members()[0];
    let proxy = FaultProxy::for_cluster(m1).await?;
    let member = m1.client().await?;
    let mut opts = JoinOptions::new(m1.name(), &proxy.url());
    opts.ca_pem = Some(m1.ca_pem().to_string());
    opts.labels.insert("name".into(), m1.name().into());
    opts.token_lifetime = MIN_LIFETIME;
    join(&host, &member, &opts).await?;
    let options = Options {
        credential_renewal_interval: Some(RENEWAL),
        ..Options::new(DEFAULT_NAMESPACE)
    };
    let cp = ControlPlane::start_with(host.clone(), &options, Arc::new(Metrics::new()));
    let fed = Federation {
        control_plane: Some(cp),
        host,
        members: vec![member],
        env,
    };
    wait_state(
        &fed,
        "Ready",
        ("True", "ClusterReady"),
        Duration::from_secs(60),
    )
    .await?;
    Ok((fed, proxy, opts))
}

async fn wait_state(
    fed: &Federation,
    type_: &str,
    expected: (&str, &str),
    timeout: Duration,
) -> anyhow::Result<()> {
    let what = format!("member1 {type_}={} ({})", expected.0, expected.1);
    wait_for(timeout, &what, || async {
        let (status, reason) = condition(&fed.host, "member1", type_).await?;
        ensure!(
            (status.as_str(), reason.as_str()) == expected,
            "{status} ({reason})"
        );
        Ok(())
    })
    .await
}

/// The time left until `at`, zero when past.
fn until(at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO)
}

#[tokio::test]
async fn a_member_token_blocked_past_its_life_expires_is_refused_and_recovers_by_rotation()
-> anyhow::Result<()> {
    init_tracing();
    let (fed, proxy, opts) = short_lived_federation().await?;
    federated_namespace(&fed, NS).await?;
    let (first, first_rotation) = held(&fed.host, "member1").await?;
    let first_rotation = first_rotation.context("no rotation on the joined token")?;
    let life = first_rotation
        .expires_at
        .duration_since(first_rotation.issued_at);
    ensure!(
        (590..=610).contains(&life.as_secs()),
        "the member granted {life:?}, not 10 minutes"
    );
    // A few renewals while objects propagate.
    let mut seen = vec![first.clone()];
    for round in 1..=40 {
        apply_fcm(&fed, "expiring", &round.to_string()).await?;
        wait_propagated(&fed, "expiring", &round.to_string()).await?;
        let (token, _) = held(&fed.host, "member1").await?;
        if !seen.contains(&token) {
            seen.push(token);
        }
        if seen.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    ensure!(seen.len() >= 3, "only {} tokens seen", seen.len());

    // Cut off: the renewals fail, and the last token lives out its life. The member stays
    // cut off until it refuses the token itself (its API server allows a minute of skew
    // past the expiry: a member back within that minute is renewed as if nothing happened).
    proxy.set_mode(FaultMode::BlackHole);
    let blocked = async {
        blocked_past_expiry(&fed).await?;
        let (last, last_rotation) = held(&fed.host, "member1").await?;
        let last_rotation = last_rotation.context("no rotation on the last token")?;
        ensure!(
            last_rotation.issued_at > first_rotation.issued_at,
            "no renewal before the cut"
        );
        eprintln!(
            "tokens: {} issued; the last expired at {}",
            seen.len(),
            last_rotation.expires_at
        );
        for (which, token) in [("first", &first), ("last", &last)] {
            wait_for(
                SKEW,
                &format!("the member to refuse the {which} token"),
                || async {
                    ensure!(!accepted(&fed, 0, token).await?, "still accepted");
                    Ok(())
                },
            )
            .await?;
        }
        Ok(())
    }
    .await;
    proxy.set_mode(FaultMode::PassThrough);
    blocked?;
    the_returned_member_stays_expired_until_rotated(&fed, &opts).await
}

/// Waits, with the member black-holed, for the failed renewals to be reported and then
/// for the expiry (the last token's life, at most 10 minutes, plus slack).
async fn blocked_past_expiry(fed: &Federation) -> anyhow::Result<()> {
    let failing = ("False", "TokenRenewalFailed");
    wait_state(fed, credential::CONDITION, failing, Duration::from_secs(60)).await?;
    let (_, rotation) = held(&fed.host, "member1").await?;
    let expires_at = rotation.context("no rotation")?.expires_at;
    let timeout = until(expires_at) + SKEW;
    eprintln!("black-holed; the token expires in {:?}", until(expires_at));
    let expired = ("False", "TokenExpired");
    wait_state(fed, credential::CONDITION, expired, timeout).await?;
    let offline = ("False", "ClusterCredentialExpired");
    wait_state(fed, "Ready", offline, SKEW).await?;
    let (status, reason) = condition(&fed.host, "member1", "Offline").await?;
    ensure!(
        (status.as_str(), reason.as_str()) == ("True", "ClusterCredentialExpired"),
        "Offline={status} ({reason})"
    );
    Ok(())
}

/// The member is back but the held token has expired: the cluster stays expired and gets
/// nothing; `rotate_credentials` (what `flotilla join --rotate-credentials` runs) makes it
/// Ready, and what was applied meanwhile arrives.
async fn the_returned_member_stays_expired_until_rotated(
    fed: &Federation,
    opts: &JoinOptions,
) -> anyhow::Result<()> {
    apply_fcm(fed, "expiring", "while-expired").await?;
    // Several health periods and renewal retries with the member reachable again.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (status, reason) = condition(&fed.host, "member1", "Ready").await?;
    let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let conditions = serde_json::to_string(&kfcs.get("member1").await?.status)?;
    ensure!(
        (status.as_str(), reason.as_str()) == ("False", "ClusterCredentialExpired"),
        "an expired token made the cluster {status} ({reason}): {conditions}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), NS);
    let value = cms
        .get("expiring")
        .await?
        .data
        .and_then(|d| d.get("k").cloned());
    ensure!(
        value.as_deref() != Some("while-expired"),
        "propagated with an expired token"
    );
    let rotated = rotate_credentials(&fed.host, &fed.members[0], opts).await?;
    ensure!(
        until(rotated.expires_at) > Duration::from_secs(500),
        "{rotated:?}"
    );
    let t = Duration::from_secs(60);
    wait_state(fed, "Ready", ("True", "ClusterReady"), t).await?;
    wait_state(fed, credential::CONDITION, ("True", "TokenRenewed"), t).await?;
    wait_propagated(fed, "expiring", "while-expired").await
}
