//! The rotation's I/O, run by every replica: read the Secret and the
//! MutatingWebhookConfiguration, take the step [`super::rotation::decide`] calls for, write
//! the Secret (guarded by its resourceVersion, so of replicas racing one wins and the others
//! read its result), publish the CA bundle, and hand the serving certificate to the TLS
//! acceptor. It decides nothing itself.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s_openapi::api::{admissionregistration::v1::MutatingWebhookConfiguration, core::v1::Secret};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{
    Error,
    certs::{self, ServingCert, Stored},
    rotation::{Policy, Step, decide},
};

/// Where the certificate lives and what it is for.
#[derive(Clone)]
pub struct Renewer {
    /// The host cluster.
    pub host: Client,
    /// The control-plane namespace, holding the Secret.
    pub namespace: String,
    /// The Secret's name.
    pub secret: String,
    /// The MutatingWebhookConfiguration whose CA bundle is kept.
    pub configuration: String,
    /// The names the serving certificate is made for.
    pub names: Vec<String>,
    /// Lifetimes and waits.
    pub policy: Policy,
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Renewer {
    /// One look: the step due (if any) taken and written, the bundle published. Returns the
    /// certificate to serve.
    pub async fn once(&self) -> Result<ServingCert, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.host.clone(), &self.namespace);
        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.host.clone());
        let found = secrets.get_opt(&self.secret).await?;
        let config = configs.get_opt(&self.configuration).await?.ok_or_else(|| {
            Error::Config(format!(
                "the MutatingWebhookConfiguration {} does not exist (config/webhook/ installs it)",
                self.configuration
            ))
        })?;
        let stored = found.as_ref().map(certs::from_secret).unwrap_or_default();
        let published = stored
            .next
            .as_ref()
            .is_some_and(|(next, _)| trusts(&config, &next.cert_pem));
        let now = now();
        let step = decide(&stored.observe(&self.names, published), &self.policy, now);
        let stored = match step {
            Step::Keep { .. } => stored,
            step => self.write(found, &stored, step, now).await?,
        };
        let bundle = stored
            .bundle()
            .ok_or_else(|| Error::Config("the Secret holds no CA after a rotation step".into()))?;
        publish(&configs, &config, &bundle).await?;
        stored
            .serving
            .ok_or_else(|| Error::Config("the Secret holds no serving certificate".into()))
    }

    /// Writes the Secret after `step`; when another replica wrote first, its content.
    async fn write(
        &self,
        found: Option<Secret>,
        stored: &Stored,
        step: Step,
        now: i64,
    ) -> Result<Stored, Error> {
        let next = stored.advance(step, &self.policy, &self.names, now)?;
        let mut secret = certs::to_secret(&next, &self.namespace, &self.secret);
        let api: Api<Secret> = Api::namespaced(self.host.clone(), &self.namespace);
        let written = match found {
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version;
                api.replace(&self.secret, &PostParams::default(), &secret)
                    .await
            }
            None => api.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                info!(step = step.as_str(), secret = %self.secret, "webhook certificate rotation step taken");
                Ok(next)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                debug!(
                    step = step.as_str(),
                    "another replica rotated first; reading its result"
                );
                Ok(certs::from_secret(&api.get(&self.secret).await?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Looks every `check_every` until the task is aborted, sending each new serving
    /// certificate to `serve`. A failed look is retried at the next; the certificate in
    /// use stays.
    pub async fn run(self, serve: impl Fn(&ServingCert)) {
        let mut last: Option<ServingCert> = None;
        loop {
            match self.once().await {
                Ok(cert) if last.as_ref() != Some(&cert) => {
                    serve(&cert);
                    last = Some(cert);
                }
                Ok(_) => {}
                Err(error) => warn!(%error, "webhook certificate rotation failed; retrying"),
            }
            tokio::time::sleep(self.policy.check_every).await;
        }
    }
}

/// Whether every webhook of `config` trusts `ca_pem`.
fn trusts(config: &MutatingWebhookConfiguration, ca_pem: &str) -> bool {
    let ca = ca_pem.trim();
    config.webhooks.iter().flatten().all(|w| {
        w.client_config
            .ca_bundle
            .as_ref()
            .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(ca))
    })
}

/// The JSON patch putting `bundle` into every webhook of `config` whose bundle differs.
fn bundle_patch(config: &MutatingWebhookConfiguration, bundle: &str) -> Vec<serde_json::Value> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    config
        .webhooks
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, w)| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes()))
        .flat_map(|(i, w)| {
            // Guarded by the webhook's name: a configuration edited since it was read makes
            // the patch fail rather than land on another webhook.
            vec![
                json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": w.name}),
                json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}),
            ]
        })
        .collect()
}

/// Puts `bundle` into every webhook of the configuration whose bundle differs.
async fn publish(
    api: &Api<MutatingWebhookConfiguration>,
    config: &MutatingWebhookConfiguration,
    bundle: &str,
) -> Result<(), Error> {
    let ops = bundle_patch(config, bundle);
    if ops.is_empty() {
        return Ok(());
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
        .map_err(|e| Error::Config(format!("the CA bundle patch is malformed: {e}")))?;
    let name = config.metadata.name.as_deref().unwrap_or_default();
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bundles: &[Option<&str>]) -> MutatingWebhookConfiguration {
        let webhooks: Vec<_> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut client = json!({"url": "https://127.0.0.1:1/mutate-pods"});
                if let Some(b) = b {
                    client["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(b));
                }
                json!({"name": format!("w{i}.example.io"), "clientConfig": client,
                       "sideEffects": "None", "admissionReviewVersions": ["v1"]})
            })
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "c"}, "webhooks": webhooks}))
            .expect("a configuration")
    }

    #[test]
    fn only_webhooks_with_another_bundle_are_patched_each_guarded_by_its_name() {
        let ops = bundle_patch(&config(&[Some("A\n"), None, Some("B\n")]), "A\n");
        let paths: Vec<_> = ops
            .iter()
            .map(|o| o["path"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            paths,
            [
                "/webhooks/1/name",
                "/webhooks/1/clientConfig/caBundle",
                "/webhooks/2/name",
                "/webhooks/2/clientConfig/caBundle"
            ]
        );
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["value"], "w1.example.io");
        assert!(bundle_patch(&config(&[Some("A\n")]), "A\n").is_empty());
    }

    #[test]
    fn the_next_ca_counts_as_published_only_when_every_webhook_trusts_it() {
        assert!(trusts(&config(&[Some("A\nN\n"), Some("N\n")]), "N\n"));
        assert!(!trusts(&config(&[Some("A\nN\n"), Some("A\n")]), "N"));
        assert!(!trusts(&config(&[None]), "N"));
    }
}
