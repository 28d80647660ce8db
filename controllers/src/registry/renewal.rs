//! One token renewer per push member whose host Secret holds a bound, rotating token (its
//! rotation annotations, [`flotilla_core::credential`]): at the renewal time it asks the
//! member for a new token of the control plane's ServiceAccount with the credential it
//! holds (TokenRequest), and writes it into the host Secret, from which the registry
//! rebuilds the cluster's client as for any token change. A failed renewal is retried
//! with backoff and reported — the `CredentialRenewed` condition (written by the health
//! worker from [`Shared::credentials`]), a Warning Event and
//! `flotilla_credential_renewals_total{result="Failed"}` — long before the token expires.
//!
//! It never writes a member object other than the TokenRequest, and never logs a token.

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::credential::{self, RenewalState, Rotation};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::events::EventType;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, instrument, warn};

use super::probe::Shared;
use crate::member_token;
use crate::metrics::RenewalResult;

/// How long one TokenRequest may take (a black-holed member never answers).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What a renewer works with; replaced whenever the registry rebuilds the client.
#[derive(Clone)]
pub struct RenewalInput {
    /// The member client (the credential the control plane holds), if one could be built.
    pub client: Option<Client>,
    /// Name of the host Secret holding the token.
    pub secret: String,
    /// The token's rotation, `None` for a token that is not rotated.
    pub rotation: Option<Rotation>,
    /// The KubeFedCluster, for Events.
    pub object: ObjectReference,
}

/// The renewer's memory between attempts.
#[derive(Default)]
struct Attempts {
    failures: u32,
    last_error: Option<String>,
    retry_at: Option<Instant>,
    /// The rotation last written by this renewer, ahead of the registry's update.
    written: Option<Rotation>,
}

impl Attempts {
    /// The newest rotation known: the input's, or the one written since.
    fn current(&mut self, input: Option<Rotation>) -> Option<Rotation> {
        let input = input?;
        match self.written.take() {
            Some(w) if w.issued_at > input.issued_at => {
                self.written = Some(w.clone());
                Some(w)
            }
            _ => Some(input),
        }
    }
}

/// Renews one cluster's token until the input sender is dropped (the cluster left).
#[instrument(name = "renewal", skip_all, fields(cluster = %name))]
pub async fn run_renewer(
    shared: Arc<Shared>,
    name: String,
    mut input: watch::Receiver<RenewalInput>,
) {
    let mut attempts = Attempts::default();
    let mut known: Option<Timestamp> = None;
    loop {
        let current = input.borrow_and_update().clone();
        let rotation = attempts.current(current.rotation.clone());
        let (Some(client), Some(rotation)) = (&current.client, rotation) else {
            shared.forget_credential(&name);
            if input.changed().await.is_err() {
                return;
            }
            continue;
        };
        // A token written by someone else (join run again) starts afresh.
        if known.is_some_and(|k| k != rotation.issued_at)
            && attempts.written.as_ref().map(|w| w.issued_at) != Some(rotation.issued_at)
        {
            attempts = Attempts::default();
        }
        known = Some(rotation.issued_at);
        shared.set_credential(&name, state(&rotation, &attempts));
        let due = attempts
            .retry_at
            .unwrap_or_else(|| instant_of(rotation.renew_at(shared.renewal_interval)));
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            changed = input.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        }
        attempt(&shared, &name, client, &current, &rotation, &mut attempts).await;
    }
}

/// One renewal attempt, its outcome recorded in `attempts` and reported.
async fn attempt(
    shared: &Shared,
    name: &str,
    client: &Client,
    input: &RenewalInput,
    rotation: &Rotation,
    attempts: &mut Attempts,
) {
    match renew(shared, client, &input.secret, rotation).await {
        Ok(renewed) => {
            info!(expires_at = %renewed.expires_at, "member token renewed");
            shared
                .metrics
                .clusters
                .observe_renewal(name, RenewalResult::Renewed, &renewed);
            if attempts.failures > 0 {
                let note = format!(
                    "the member token was renewed after {} failed attempt(s)",
                    attempts.failures
                );
                publish(
                    shared,
                    input,
                    EventType::Normal,
                    credential::RenewalReason::TokenRenewed,
                    note,
                )
                .await;
            }
            *attempts = Attempts {
                written: Some(renewed.clone()),
                ..Attempts::default()
            };
            shared.set_credential(name, state(&renewed, attempts));
        }
        Err(error) => {
            attempts.failures += 1;
            let left = rotation.expires_at.duration_since(Timestamp::now());
            let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
            let delay = credential::retry_delay(attempts.failures, left);
            attempts.retry_at = Some(Instant::now() + delay);
            attempts.last_error = Some(error.clone());
            warn!(%error, failures = attempts.failures, ?delay, "renewing the member token failed; retrying");
            shared
                .metrics
                .clusters
                .observe_renewal(name, RenewalResult::Failed, rotation);
            let report = state(rotation, attempts);
            let (_, reason, note) = credential::condition(&report, Timestamp::now());
            shared.set_credential(name, report);
            publish(shared, input, EventType::Warning, reason, note).await;
        }
    }
}

/// A new token through the member's TokenRequest API, written into the host Secret.
async fn renew(
    shared: &Shared,
    client: &Client,
    secret: &str,
    rotation: &Rotation,
) -> Result<Rotation, String> {
    let request = member_token::request(
        client,
        &rotation.namespace,
        &rotation.service_account,
        rotation.lifetime,
    );
    let (token, renewed) = tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .map_err(|_| format!("the TokenRequest got no answer within {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| format!("the TokenRequest failed: {}", super::error_chain(&e)))?;
    let host = shared.api.clone().into_client();
    let ns = &shared.namespace;
    member_token::store(&host, ns, secret, &token, &renewed)
        .await
        .map_err(|e| {
            format!(
                "writing Secret {ns}/{secret} failed: {}",
                super::error_chain(&e)
            )
        })?;
    Ok(renewed)
}

fn state(rotation: &Rotation, attempts: &Attempts) -> RenewalState {
    RenewalState {
        expires_at: rotation.expires_at,
        failures: attempts.failures,
        last_error: attempts.last_error.clone(),
    }
}

/// The monotonic instant of a wall-clock time (now, when it is past).
fn instant_of(at: Timestamp) -> Instant {
    let wait = at.duration_since(Timestamp::now());
    Instant::now() + Duration::try_from(wait).unwrap_or(Duration::ZERO)
}

async fn publish(
    shared: &Shared,
    input: &RenewalInput,
    type_: EventType,
    reason: credential::RenewalReason,
    note: String,
) {
    crate::events::publish(
        &shared.recorder,
        &input.object,
        type_,
        reason.as_str(),
        "RenewCredential",
        note,
    )
    .await;
}
