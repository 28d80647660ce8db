//! Installing CustomResourceDefinitions and waiting until the API server serves them — what
//! `flotilla dev up`, `flotilla enable`, the benchmark and the tests all need.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};

/// Installing or waiting for a CRD failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The API server refused or failed a request.
    #[error("{action} CRD {name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// The CRD.
        name: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The CRD did not become Established in time.
    #[error("CRD {name} was not established within {timeout:?}")]
    NotEstablished {
        /// The CRD.
        name: String,
        /// How long was waited.
        timeout: Duration,
    },
}

/// Whether a CRD's `Established` condition is True.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Waits until the CRD `name` is Established, polling every 100 ms.
pub async fn wait_established(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let crd = crds.get(name).await.map_err(|source| InstallError::Api {
            action: "reading",
            name: name.to_string(),
            source,
        })?;
        if is_established(&crd) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(InstallError::NotEstablished {
                name: name.to_string(),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Server-side applies every CRD (field manager `manager`, forced) and waits until each is
/// Established (each within `timeout`).
pub async fn install_crds(
    client: &Client,
    crds: &[CustomResourceDefinition],
    manager: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(manager).force();
    for crd in crds {
        api.patch(&crd.name_any(), &pp, &Patch::Apply(crd))
            .await
            .map_err(|source| InstallError::Api {
                action: "installing",
                name: crd.name_any(),
                source,
            })?;
    }
    for crd in crds {
        wait_established(&api, &crd.name_any(), timeout).await?;
    }
    Ok(())
}
