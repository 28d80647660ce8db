//! One reconcile of a ServiceAccountImport: find its Secret, look up the cluster, ask
//! [`plan::decide`] whether a new token is due, request it through the member's
//! TokenRequest API with the registry's member client, write the Secret, then the status
//! and a Warning Event for a new failure. Decisions are in [`plan`]; this module only
//! fetches and writes. A token is never logged nor put into a status or an Event.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use flotilla_api::{
    FIELD_MANAGER, KubeFedCluster, ServiceAccountImportStatus,
    admiralty::{AnyImport, ImportGroup},
    multicluster::{
        EXPIRATION_ANNOTATION, ISSUED_ANNOTATION, ImportReason, REFRESH_FRACTION_ANNOTATION,
        SECRET_LABEL, SOURCE_ANNOTATION,
    },
};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{
        events::{EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{
    kubeconfig::{self, Endpoint},
    plan::{self, Decision, Outcome, StoredToken},
};
use flotilla_multicluster::{runner::Action, written::WrittenOver};

use crate::{
    metrics::{ImportLabels, Metrics},
    multicluster::ClusterSet,
};

/// How long a TokenRequest may take.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Namespace and name of an import.
pub type Key = (String, String);

/// Everything a reconcile reads and writes through.
pub struct Ctx {
    /// Host client.
    pub host: Client,
    /// The member clusters and their clients.
    pub clusters: ClusterSet,
    /// The group served (Flotilla's or Admiralty's): the same reconcile for both.
    pub group: ImportGroup,
    /// Cache of every ServiceAccountImport of the group.
    pub imports: Store<AnyImport>,
    /// Cache of the KubeFedClusters of the control-plane namespace.
    pub kubefed: Store<KubeFedCluster>,
    /// Cache of the Secrets the controller wrote (labelled; without their data).
    pub secrets: Store<Secret>,
    /// The control-plane namespace.
    pub namespace: String,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics (reconciles by reason, tokens issued).
    pub metrics: Arc<Metrics>,
    /// The status last written per import over the cached version it was based on: a
    /// reconcile the Secret's event starts before the import's own event arrives compares
    /// with it, and writes nothing.
    pub written: WrittenOver<Key, ServiceAccountImportStatus>,
}

/// A failed step: why, and what to tell people.
type Failure = (ImportReason, String);

impl Ctx {
    /// Reconciles the import `key`.
    #[tracing::instrument(skip(self), fields(import = %format!("{}/{}", key.0, key.1)))]
    pub async fn reconcile(&self, key: &Key) -> Action {
        let import = self.imports.get(
            &ObjectRef::<AnyImport>::new_with(&key.1, self.group.api_resource()).within(&key.0),
        );
        let live = import
            .as_ref()
            .filter(|i| i.metadata.deletion_timestamp.is_none());
        // Owned by their imports, but a garbage collector may miss a deletion.
        let uid = live.and_then(|i| i.uid());
        if !self.remove_stale_secrets(key, uid.as_deref()).await {
            return Action::backoff();
        }
        let Some(import) = live else {
            return Action::AwaitChange;
        };
        if self.unsettled(&import.spec.cluster_name) {
            // A cluster-set change requeues the import once the cluster is probed.
            debug!("cluster readiness not known yet; waiting for the registry");
            return Action::AwaitChange;
        }
        let (outcome, next) = match self.sync(import).await {
            Ok(done) => done,
            Err(outcome) => (outcome, Action::backoff()),
        };
        self.record(import, &outcome).await;
        next
    }

    /// Brings the Secret up to date; `Err` carries the outcome of a failed step.
    async fn sync(&self, import: &AnyImport) -> Result<(Outcome, Action), Outcome> {
        let (secret_name, existing) = self.find_secret(import).await.map_err(|e| Outcome {
            reason: ImportReason::SecretWriteFailed,
            message: format!("reading the import's Secret failed: {e}"),
            secret_name: import.status.as_ref().and_then(|s| s.secret_name.clone()),
            expiration: None,
        })?;
        let stored = existing.as_ref().and_then(|s| {
            let annotations = s.metadata.annotations.clone().unwrap_or_default();
            StoredToken::from_annotations(&annotations, true)
        });
        let failed = |(reason, message): Failure| Outcome {
            reason,
            message: with_previous(message, existing.as_ref(), stored.as_ref()),
            secret_name: existing.as_ref().map(|_| secret_name.clone()),
            expiration: stored.as_ref().map(|s| s.expires),
        };
        let spec = &import.spec;
        let (endpoint, client) = self.member(&spec.cluster_name).map_err(failed)?;
        let source = kubeconfig::source_hash(&spec.cluster_name, &endpoint, spec);
        let complete = existing
            .as_ref()
            .is_some_and(|s| kubeconfig::is_complete(s.data.as_ref(), &endpoint));
        let current = stored.clone().map(|s| StoredToken { complete, ..s });
        let fraction = plan::refresh_fraction(
            import
                .annotations()
                .get(REFRESH_FRACTION_ANNOTATION)
                .map(String::as_str),
        );
        let now = Timestamp::now();
        if let Decision::Keep { refresh_in } =
            plan::decide(now, current.as_ref(), &source, fraction)
        {
            let expires = current.as_ref().map(|s| s.expires);
            return Ok((
                issued(spec, secret_name, expires),
                Action::Requeue(refresh_in),
            ));
        }
        let (token, expires) = request_token(&client, import).await.map_err(failed)?;
        let secret = build_secret(
            (self.group, import),
            &secret_name,
            &endpoint,
            &source,
            &token,
            now,
            expires,
        )
        .map_err(|m| failed((ImportReason::ClusterConfigMalformed, m)))?;
        self.write_secret(import, &secret).await.map_err(|e| {
            failed((
                ImportReason::SecretWriteFailed,
                format!("writing Secret {secret_name} failed: {e}"),
            ))
        })?;
        self.metrics.imports.tokens_issued.inc();
        info!(secret = %secret_name, %expires, "token issued for the import");
        let at = plan::refresh_at(now, expires, fraction);
        let wait = Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or_default();
        let next = Action::Requeue(wait.max(Duration::from_secs(1)));
        Ok((issued(spec, secret_name, Some(expires)), next))
    }

    /// Whether cluster `name` has not been probed by this process while its stored status
    /// says Ready ([`plan::cluster_unsettled`]).
    fn unsettled(&self, name: &str) -> bool {
        let Some(kfc) = self
            .kubefed
            .get(&ObjectRef::<KubeFedCluster>::new(name).within(&self.namespace))
        else {
            return false;
        };
        let ready_in_set = self
            .clusters
            .get(name)
            .is_some_and(|c| c.ready && c.client.is_some());
        let stored_ready = kfc.status.as_ref().is_some_and(|s| s.is_ready());
        plan::cluster_unsettled(ready_in_set, stored_ready)
    }

    /// The endpoint and client of cluster `name`, or why there is none.
    fn member(&self, name: &str) -> Result<(Endpoint, Client), Failure> {
        let kfc = self
            .kubefed
            .get(&ObjectRef::<KubeFedCluster>::new(name).within(&self.namespace))
            .ok_or_else(|| {
                (
                    ImportReason::ClusterNotFound,
                    format!("no KubeFedCluster {name:?} in namespace {}", self.namespace),
                )
            })?;
        let not_ready = || {
            (
                ImportReason::ClusterNotReady,
                format!("cluster {name:?} is not Ready"),
            )
        };
        let state = self.clusters.get(name).ok_or_else(not_ready)?;
        let client = state.client.filter(|_| state.ready).ok_or_else(not_ready)?;
        let endpoint = Endpoint::of(&kfc.spec);
        endpoint
            .ca_pem()
            .map_err(|m| (ImportReason::ClusterConfigMalformed, m))?;
        Ok((endpoint, client))
    }

    /// The Secret name the import uses and the Secret, when it exists: the first
    /// candidate that is free or already owned by the import.
    async fn find_secret(
        &self,
        import: &AnyImport,
    ) -> Result<(String, Option<Secret>), kube::Error> {
        let ns = import.namespace().unwrap_or_default();
        let uid = import.uid().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(self.host.clone(), &ns);
        let in_status = import
            .status
            .as_ref()
            .and_then(|s| s.secret_name.as_deref());
        let candidates = plan::secret_name_candidates(&import.name_any(), &uid, in_status);
        for name in &candidates {
            match secrets.get_opt(name).await? {
                None => return Ok((name.clone(), None)),
                Some(s) if owned_by(&s, &uid) => return Ok((name.clone(), Some(s))),
                Some(_) => debug!(secret = %name, "name taken by a Secret the import does not own"),
            }
        }
        // Both default names are taken by foreign Secrets: the last candidate carries the
        // import's uid, so it being taken is an anomaly a write will report.
        let last = candidates.last().cloned().unwrap_or_default();
        Ok((last, None))
    }

    async fn write_secret(&self, import: &AnyImport, secret: &Secret) -> Result<(), kube::Error> {
        let ns = import.namespace().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.host.clone(), &ns);
        api.patch(
            &secret.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(secret),
        )
        .await
        .map(|_| ())
    }

    /// Writes the status when it changed, and a Warning Event for a new failure.
    async fn record(&self, import: &AnyImport, outcome: &Outcome) {
        let key = (import.namespace().unwrap_or_default(), import.name_any());
        let base = import.resource_version().unwrap_or_default();
        let ours = self.written.lagging(&key, &base);
        let previous = ours.as_ref().or(import.status.as_ref());
        self.metrics
            .imports
            .reconciles
            .get_or_create(&ImportLabels {
                reason: outcome.reason.as_str(),
            })
            .inc();
        let next = plan::next_status(previous, outcome, Timestamp::now());
        if plan::warrants_warning(previous, outcome.reason) {
            warn!(reason = outcome.reason.as_str(), message = %outcome.message, "import not ready");
            crate::events::publish(
                &self.recorder,
                &import.object_ref(&self.group.api_resource()),
                EventType::Warning,
                outcome.reason.as_str(),
                "RequestToken",
                outcome.message.clone(),
            )
            .await;
        }
        if previous == Some(&next) {
            return;
        }
        self.written.forget(&key);
        match self.write_status(import, &next).await {
            Ok(()) => self.written.remember(key, base, next),
            Err(e) => warn!(error = %e, "writing the import's status failed"),
        }
    }

    async fn write_status(
        &self,
        import: &AnyImport,
        status: &ServiceAccountImportStatus,
    ) -> Result<(), kube::Error> {
        let ns = import.namespace().unwrap_or_default();
        let api: Api<AnyImport> =
            Api::namespaced_with(self.host.clone(), &ns, &self.group.api_resource());
        // Absent fields are sent as null so that a merge patch removes them.
        let patch = json!({"status": {
            "conditions": status.conditions,
            "secretName": status.secret_name,
            "expirationTimestamp": status.expiration_timestamp,
        }});
        api.patch_status(
            &import.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
    }
}

/// The Ready outcome for a Secret holding a current token.
fn issued(
    spec: &flotilla_api::ServiceAccountImportSpec,
    secret_name: String,
    expires: Option<Timestamp>,
) -> Outcome {
    Outcome {
        reason: ImportReason::TokenIssued,
        message: format!(
            "Secret {secret_name} holds a token of ServiceAccount {}/{} in cluster {}",
            spec.namespace, spec.name, spec.cluster_name
        ),
        secret_name: Some(secret_name),
        expiration: expires,
    }
}

/// A failure's message, saying whether the previous Secret still holds a valid token.
fn with_previous(
    message: String,
    existing: Option<&Secret>,
    stored: Option<&StoredToken>,
) -> String {
    match (existing, stored) {
        (Some(s), Some(t)) if t.valid_at(Timestamp::now()) => format!(
            "{message}; Secret {} keeps the previous token until {}",
            s.name_any(),
            t.expires
        ),
        _ => message,
    }
}

fn owned_by(secret: &Secret, uid: &str) -> bool {
    secret.owner_references().iter().any(|o| o.uid == uid)
}

/// Requests a token of the import's remote ServiceAccount; the token and its expiry.
async fn request_token(
    client: &Client,
    import: &AnyImport,
) -> Result<(String, Timestamp), Failure> {
    let spec = &import.spec;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &spec.namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(spec.lifetime_seconds()),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer = tokio::time::timeout(
        TOKEN_REQUEST_TIMEOUT,
        api.create_token_request(&spec.name, &PostParams::default(), &request),
    )
    .await
    .map_err(|_| {
        (
            ImportReason::TokenRequestFailed,
            format!(
                "the TokenRequest to cluster {} timed out",
                spec.cluster_name
            ),
        )
    })?
    .map_err(|e| token_request_failure(spec, e))?;
    let status = answer.status.ok_or_else(|| {
        (
            ImportReason::TokenRequestFailed,
            "the TokenRequest answer has no status".to_string(),
        )
    })?;
    Ok((status.token, status.expiration_timestamp.0))
}

/// The reason and message of a failed TokenRequest. The member's answer never holds a
/// token (it failed), so its message is safe to show.
fn token_request_failure(spec: &flotilla_api::ServiceAccountImportSpec, e: kube::Error) -> Failure {
    let sa = format!("{}/{}", spec.namespace, spec.name);
    match e {
        kube::Error::Api(s) if s.code == 404 => (
            ImportReason::ServiceAccountNotFound,
            format!(
                "no ServiceAccount {sa} in cluster {}: {}",
                spec.cluster_name, s.message
            ),
        ),
        kube::Error::Api(s) if s.code == 403 => (
            ImportReason::TokenRequestForbidden,
            format!(
                "cluster {} refused a token for {sa} (the member credential needs serviceaccounts/token create): {}",
                spec.cluster_name, s.message
            ),
        ),
        e => (
            ImportReason::TokenRequestFailed,
            format!(
                "requesting a token for {sa} in cluster {} failed: {e}",
                spec.cluster_name
            ),
        ),
    }
}

/// The Secret of an import for a new token.
fn build_secret(
    (group, import): (ImportGroup, &AnyImport),
    name: &str,
    endpoint: &Endpoint,
    source: &str,
    token: &str,
    issued: Timestamp,
    expires: Timestamp,
) -> Result<Secret, String> {
    let spec = &import.spec;
    let data = kubeconfig::secret_data(&import.name_any(), endpoint, &spec.namespace, token)?;
    let owner = OwnerReference {
        api_version: group.api_resource().api_version,
        kind: group.api_resource().kind,
        name: import.name_any(),
        uid: import.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: import.namespace(),
            labels: Some(BTreeMap::from([(SECRET_LABEL.into(), "true".into())])),
            annotations: Some(BTreeMap::from([
                (ISSUED_ANNOTATION.into(), issued.to_string()),
                (EXPIRATION_ANNOTATION.into(), expires.to_string()),
                (SOURCE_ANNOTATION.into(), source.to_string()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}
