//! The agent's own host credential: a bound token of its ServiceAccount in its cluster's
//! host namespace (`flotilla join --mode pull` issues one through TokenRequest and allows
//! that ServiceAccount to request tokens of itself and of no other), renewed by the agent
//! through the same TokenRequest API with the token it holds, two thirds into the token's
//! life (or after `renewal_interval`). The host client reads its token from a file
//! ([`use_token_file`]; kube re-reads it about once a minute), which the renewer replaces;
//! the new token also goes into the member Secret the agent's kubeconfig came from, so a
//! restarted agent starts from a valid token. A failed renewal is retried with the
//! control plane's backoff ([`flotilla_core::credential::retry_delay`]); a host that
//! refuses the request outright (403: an agent joined before rotation, whose token never
//! expires) stops the renewer with one warning.
//!
//! Each attempt is counted in `flotilla_agent_host_token_renewals_total{result}` and the
//! current token's expiry is `flotilla_agent_host_token_expiry_timestamp_seconds`, so an
//! alert fires well before a token that cannot be renewed runs out.
//!
//! The token is never logged, put in an error or a metric; the file is written `0600`.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use flotilla_core::credential::{Rotation, retry_delay};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Secret, ServiceAccount},
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    config::Kubeconfig,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::metrics::AgentMetrics;

/// How long one TokenRequest may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the renewed token is kept beside the file: the member Secret holding the agent's
/// host kubeconfig.
#[derive(Clone)]
pub struct Persist {
    /// Client of the member cluster.
    pub member: Client,
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret: String,
    /// Key of the kubeconfig in it.
    pub key: String,
    /// The kubeconfig as it was read; its users' tokens are replaced.
    pub kubeconfig: Kubeconfig,
}

/// What the renewer renews, and where it puts the result.
#[derive(Clone)]
pub struct HostCredential {
    /// The agent's namespace in the host.
    pub namespace: String,
    /// The agent's ServiceAccount there.
    pub service_account: String,
    /// Lifetime asked for each token (10 minutes at least).
    pub lifetime: Duration,
    /// Renew at most this long after a token was issued (tests and drills).
    pub renewal_interval: Option<Duration>,
    /// The file the host client reads its token from.
    pub token_file: PathBuf,
    /// The member Secret to keep the token in too, if any.
    pub persist: Option<Persist>,
}

/// Moves `config`'s bearer token into `path` (mode `0600`) and makes `config` read it
/// from there, so that a renewed token written to `path` is picked up. `false` (nothing
/// changed) when `config` holds no static token (an exec plugin, a token file of its
/// own): there is nothing for the agent to renew.
pub fn use_token_file(config: &mut kube::Config, path: &Path) -> std::io::Result<bool> {
    // kube keeps the token as a secret string; its kubeconfig serializer is the one way
    // to read it without another dependency.
    let user = serde_json::to_value(&config.auth_info).map_err(std::io::Error::other)?;
    let Some(token) = user.get("token").and_then(|t| t.as_str()) else {
        return Ok(false);
    };
    write_private(path, token)?;
    config.auth_info.token = None;
    config.auth_info.token_file = Some(path.display().to_string());
    Ok(true)
}

/// Writes `text` to `path` through a temporary file and a rename, readable by its owner
/// only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// What one renewal attempt came to.
enum Outcome {
    Renewed(Rotation),
    Failed(String),
    /// The host refuses the agent tokens of its own ServiceAccount (403): not renewable.
    Refused(String),
}

/// Renews the agent's host token until `stop`: once at start (the expiry of the token it
/// started with is not known), then at each renewal time; each outcome is counted in
/// `metrics`.
pub async fn run(
    host: Client,
    credential: HostCredential,
    metrics: Arc<AgentMetrics>,
    stop: CancellationToken,
) {
    let mut current: Option<Rotation> = None;
    let mut failures = 0u32;
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match renew(&host, &credential).await {
            Outcome::Renewed(rotation) => {
                metrics.host_token_renewal("renewed");
                metrics
                    .host_token_expiry
                    .set(rotation.expires_at.as_second());
                info!(expires_at = %rotation.expires_at, "the agent's host token was renewed");
                failures = 0;
                wait = until(rotation.renew_at(credential.renewal_interval));
                current = Some(rotation);
            }
            Outcome::Failed(error) => {
                metrics.host_token_renewal("failed");
                failures += 1;
                let left = current
                    .as_ref()
                    .map_or(Duration::ZERO, |r| until(r.expires_at));
                wait = retry_delay(failures, left);
                warn!(%error, failures, ?wait, "renewing the agent's host token failed; retrying");
            }
            Outcome::Refused(error) => {
                metrics.host_token_renewal("refused");
                warn!(%error, "the host refuses the agent tokens of its own ServiceAccount (joined before rotation?); its host token is not renewed");
                return;
            }
        }
    }
}

fn until(at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO)
}

/// One renewal: a TokenRequest with the token the agent holds, then the file, then the
/// member Secret (whose failure is only a warning: the running agent has its token).
async fn renew(host: &Client, credential: &HostCredential) -> Outcome {
    let api: Api<ServiceAccount> = Api::namespaced(host.clone(), &credential.namespace);
    let body = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: i64::try_from(credential.lifetime.as_secs()).ok(),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued_at = Timestamp::now();
    let params = PostParams::default();
    let request = api.create_token_request(&credential.service_account, &params, &body);
    let answer = match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Err(_) => return Outcome::Failed(format!("no answer within {REQUEST_TIMEOUT:?}")),
        Ok(Err(kube::Error::Api(s))) if s.code == 403 => {
            return Outcome::Refused(format!("HTTP 403: {}", s.message));
        }
        Ok(Err(e)) => return Outcome::Failed(flotilla_multicluster::error_chain(&e)),
        Ok(Ok(answer)) => answer,
    };
    let Some(status) = answer.status else {
        return Outcome::Failed("the TokenRequest answer has no status".into());
    };
    if let Err(e) = write_private(&credential.token_file, &status.token) {
        let file = credential.token_file.display();
        return Outcome::Failed(format!("writing the token file {file}: {e}"));
    }
    if let Some(persist) = &credential.persist
        && let Err(error) = keep_in_secret(persist, &status.token).await
    {
        warn!(secret = %persist.secret, %error, "keeping the renewed host token in the member Secret failed; a restarted agent starts from the older token");
    }
    Outcome::Renewed(Rotation {
        namespace: credential.namespace.clone(),
        service_account: credential.service_account.clone(),
        lifetime: credential.lifetime,
        issued_at,
        expires_at: status.expiration_timestamp.0,
    })
}

/// Writes the kubeconfig with `token` as every user's token into the member Secret.
async fn keep_in_secret(persist: &Persist, token: &str) -> Result<(), String> {
    let mut kubeconfig = persist.kubeconfig.clone();
    for user in &mut kubeconfig.auth_infos {
        if let Some(info) = user.auth_info.as_mut() {
            info.token = Some(token.to_owned().into());
            info.token_file = None;
        }
    }
    let text = serde_json::to_string_pretty(&kubeconfig)
        .map_err(|e| format!("encoding the kubeconfig: {e}"))?;
    let patch = serde_json::json!({"stringData": {persist.key.as_str(): text}});
    let secrets: Api<Secret> = Api::namespaced(persist.member.clone(), &persist.namespace);
    secrets
        .patch(
            &persist.secret,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(|e| flotilla_multicluster::error_chain(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn config(token: Option<&str>) -> kube::Config {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap_or_default());
        config.auth_info.token = token.map(|t| t.to_owned().into());
        config
    }

    #[test]
    fn a_static_token_moves_into_a_private_file_the_config_then_reads() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("flotilla-host-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("token");
        let mut with = config(Some("abc.def.ghi"));
        assert!(use_token_file(&mut with, &path)?);
        assert_eq!(std::fs::read_to_string(&path)?, "abc.def.ghi");
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(with.auth_info.token.is_none());
        assert_eq!(with.auth_info.token_file, Some(path.display().to_string()));
        std::fs::remove_dir_all(&dir)
    }

    #[test]
    fn a_config_without_a_static_token_has_nothing_to_renew() -> std::io::Result<()> {
        let path = std::env::temp_dir().join("flotilla-host-cred-never-written");
        let mut without = config(None);
        assert!(!use_token_file(&mut without, &path)?);
        assert!(!path.exists());
        Ok(())
    }
}
