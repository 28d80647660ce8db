//! Waits on objects in any cluster (typically the members): present, present with the
//! wanted content, absent, and a namespace present in every member. Waits on a federated
//! object's own status live on [`crate::host::FederatedRef`].

use std::{fmt::Debug, time::Duration};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::wait_for;

/// How long a propagation step may take on the shared machine.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until `name` exists in `api` and `check` accepts it; returns it. The error on
/// timeout names the object's URL and carries `check`'s last complaint.
pub async fn wait_object<K, F>(
    timeout: Duration,
    api: &Api<K>,
    name: &str,
    check: F,
) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
    F: Fn(&K) -> anyhow::Result<()>,
{
    let what = format!("{}/{name} as expected", api.resource_url());
    wait_for(timeout, &what, || async {
        let obj = api.get_opt(name).await?.context("absent")?;
        check(&obj)?;
        Ok(obj)
    })
    .await
}

/// Waits until `name` exists in `api`; returns it.
pub async fn wait_present<K>(timeout: Duration, api: &Api<K>, name: &str) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    wait_object(timeout, api, name, |_| Ok(())).await
}

/// Waits until `name` is gone from `api`.
pub async fn wait_absent<K>(timeout: Duration, api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let what = format!("{}/{name} absent", api.resource_url());
    wait_for(timeout, &what, || async {
        ensure!(api.get_opt(name).await?.is_none(), "present");
        Ok(())
    })
    .await
}

/// Waits until namespace `name` exists in each of `clusters`.
pub async fn wait_namespace_in(clusters: &[Client], name: &str) -> anyhow::Result<()> {
    for client in clusters {
        wait_present(TIMEOUT, &Api::<Namespace>::all(client.clone()), name).await?;
    }
    Ok(())
}
