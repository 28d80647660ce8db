//! The agent's heartbeat: it renews a Lease (`flotilla-agent`) in its cluster's namespace
//! of the host every third of the lease duration; the host's registry marks the cluster
//! Ready while the Lease is fresh and Offline once it lapses. The member's Kubernetes
//! version and the EndpointSlice version it serves ride along as annotations (the host
//! cannot ask the member).

use std::{sync::Arc, time::Duration};

use flotilla_api::work::{AGENT_FIELD_MANAGER, AGENT_LEASE};
use k8s_openapi::{
    api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime, jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tracing::{debug, warn};

use flotilla_api::mcs_report::SLICE_VERSION_ANNOTATION;
use flotilla_core::member::VERSION_ANNOTATION;

use super::observe::Observer;

/// Renews the Lease until the task is aborted.
pub async fn heartbeat(
    leases: Api<Lease>,
    member: Client,
    identity: String,
    duration: Duration,
    observer: Arc<Observer>,
) {
    let period = (duration / 3).max(Duration::from_millis(200));
    let mut version: Option<String> = None;
    let mut slices: Option<String> = None;
    loop {
        if version.is_none() {
            version = member.apiserver_version().await.ok().map(|i| i.git_version);
        }
        if slices.is_none() {
            slices = super::mcs::slice_version(&member).await;
        }
        let facts = [
            (VERSION_ANNOTATION, version.as_deref()),
            (SLICE_VERSION_ANNOTATION, slices.as_deref()),
        ];
        let renewed = renew(&leases, &identity, duration, &facts).await;
        observer.lease_renewal(renewed.as_ref().map(|_| ()));
        match renewed {
            Ok(()) => debug!("lease renewed"),
            Err(e) => warn!(error = %e, "renewing the heartbeat Lease failed; retrying"),
        }
        tokio::time::sleep(period).await;
    }
}

async fn renew(
    leases: &Api<Lease>,
    identity: &str,
    duration: Duration,
    facts: &[(&str, Option<&str>)],
) -> Result<(), kube::Error> {
    let now = MicroTime(Timestamp::now());
    let seconds = i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let mut annotations = serde_json::Map::new();
    for (key, value) in facts {
        if let Some(v) = value {
            annotations.insert((*key).into(), json!(v));
        }
    }
    let patch = json!({
        "metadata": {"annotations": annotations},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": seconds, "renewTime": now},
    });
    let pp = PatchParams {
        field_manager: Some(AGENT_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match leases.patch(AGENT_LEASE, &pp, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let mut lease: Lease =
                serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
            lease.metadata.name = Some(AGENT_LEASE.into());
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}
