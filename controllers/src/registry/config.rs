//! The KubeFedConfig singleton: created with kubefed's defaults when absent (also after
//! it is deleted), followed while it changes, and published as an [`EffectiveConfig`].

use std::time::Duration;

use flotilla_api::core::EffectiveConfig;
use flotilla_api::{KUBEFED_CONFIG_NAME, KubeFedConfig, KubeFedConfigSpec};
use futures::StreamExt;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tracing::{info, instrument, warn};

use super::Error;

/// Pause before retrying to create the singleton after a failure.
const CREATE_RETRY: Duration = Duration::from_secs(5);

/// The singleton with every default written out.
pub fn default_config(namespace: &str) -> KubeFedConfig {
    KubeFedConfig {
        metadata: ObjectMeta {
            name: Some(KUBEFED_CONFIG_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: KubeFedConfigSpec::with_defaults(),
    }
}

/// Creates the singleton with defaults; an existing one is left alone.
#[instrument(skip(api), fields(name = KUBEFED_CONFIG_NAME))]
pub async fn ensure_config(api: &Api<KubeFedConfig>, namespace: &str) -> Result<bool, Error> {
    match api
        .create(&PostParams::default(), &default_config(namespace))
        .await
    {
        Ok(_) => {
            info!("created KubeFedConfig with defaults");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(source) => Err(Error::Kube {
            action: "creating the KubeFedConfig",
            source,
        }),
    }
}

/// Follows the singleton until the receiver side is gone, publishing its effective settings.
pub async fn run(api: Api<KubeFedConfig>, namespace: String, tx: watch::Sender<EffectiveConfig>) {
    let publish = |spec: &KubeFedConfigSpec| {
        let effective = spec.effective();
        tx.send_if_modified(|current| {
            if *current == effective {
                return false;
            }
            info!(
                period = ?effective.health_period,
                timeout = ?effective.health_timeout,
                failure_threshold = effective.failure_threshold,
                success_threshold = effective.success_threshold,
                "KubeFedConfig in effect"
            );
            *current = effective;
            true
        });
    };
    let selector = format!("metadata.name={KUBEFED_CONFIG_NAME}");
    let stream =
        watcher(api.clone(), watcher::Config::default().fields(&selector)).default_backoff();
    futures::pin_mut!(stream);
    let mut seen_in_listing = false;
    while let Some(event) = stream.next().await {
        if tx.is_closed() {
            return;
        }
        match event {
            Ok(watcher::Event::Init) => seen_in_listing = false,
            Ok(watcher::Event::InitApply(c)) | Ok(watcher::Event::Apply(c)) => {
                if c.name_any() == KUBEFED_CONFIG_NAME {
                    seen_in_listing = true;
                    publish(&c.spec);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if !seen_in_listing {
                    create_until_done(&api, &namespace).await;
                    publish(&KubeFedConfigSpec::with_defaults());
                }
            }
            Ok(watcher::Event::Delete(_)) => {
                publish(&KubeFedConfigSpec::with_defaults());
                create_until_done(&api, &namespace).await;
            }
            Err(error) if crate::watch::is_expected_relist(&error) => {
                tracing::debug!(%error, "the KubeFedConfig watch expired; relisting")
            }
            Err(error) => warn!(%error, "watching the KubeFedConfig failed; retrying"),
        }
    }
}

async fn create_until_done(api: &Api<KubeFedConfig>, namespace: &str) {
    loop {
        match ensure_config(api, namespace).await {
            Ok(_) => return,
            Err(error) => {
                warn!(
                    error = %super::error_chain(&error),
                    "could not create the KubeFedConfig; running with defaults and retrying"
                );
                tokio::time::sleep(CREATE_RETRY).await;
            }
        }
    }
}
