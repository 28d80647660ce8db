//! A handle on one federated object in the host: reading its status, waiting until it is
//! propagated (for its current generation) or until clusters report given reasons, and
//! deleting it; and waiting until clusters are registered Ready. It never looks at member
//! clusters; see [`crate::wait`] for those.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster,
    federated::{ClusterStatus, FederatedCondition, FederatedStatus},
};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject},
    core::ApiResource,
};

use crate::{wait::TIMEOUT, wait_for};

/// One federated object in the host, by namespace and name.
#[derive(Clone)]
pub struct FederatedRef {
    /// The federated type's API in the object's namespace.
    pub api: Api<DynamicObject>,
    /// The object's name.
    pub name: String,
}

impl FederatedRef {
    /// The federated object `namespace/name` of type `ar` in `host`.
    pub fn new(host: &Client, ar: &ApiResource, namespace: &str, name: &str) -> Self {
        FederatedRef {
            api: Api::namespaced_with(host.clone(), namespace, ar),
            name: name.into(),
        }
    }

    /// The object as it is now.
    pub async fn get(&self) -> anyhow::Result<DynamicObject> {
        Ok(self.api.get(&self.name).await?)
    }

    /// Its status as it is now (empty when none is written yet).
    pub async fn status(&self) -> anyhow::Result<FederatedStatus> {
        Ok(FederatedStatus::from_dynamic(&self.get().await?))
    }

    /// Per-cluster status reasons by cluster name (`""` for propagated).
    pub async fn cluster_reasons(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let status = self.status().await?;
        Ok(status
            .clusters
            .into_iter()
            .map(|c| (c.name, c.status))
            .collect())
    }

    /// The status when it describes the object's current generation
    /// (`status.observedGeneration == metadata.generation`) and says Propagation=True;
    /// an error saying what is missing otherwise.
    pub async fn check_propagated(&self) -> anyhow::Result<FederatedStatus> {
        let obj = self.get().await?;
        let status = FederatedStatus::from_dynamic(&obj);
        ensure!(
            status.observed_generation == obj.metadata.generation.unwrap_or(0),
            "status is of an older generation: {status:?}"
        );
        let propagated = status.propagation().is_some_and(|c| c.status == "True");
        ensure!(propagated, "status: {status:?}");
        Ok(status)
    }

    /// Waits until [`check_propagated`](Self::check_propagated) holds; returns the status.
    pub async fn wait_propagated(&self) -> anyhow::Result<FederatedStatus> {
        wait_for(TIMEOUT, &format!("{} propagated", self.name), || {
            self.check_propagated()
        })
        .await
    }

    /// Waits until every named cluster reports its reason (`""` for propagated) in
    /// `status.clusters`; returns the status.
    pub async fn wait_cluster_reasons(
        &self,
        expected: &[(&str, &str)],
    ) -> anyhow::Result<FederatedStatus> {
        let what = format!("{}: cluster reasons {expected:?}", self.name);
        wait_for(TIMEOUT, &what, || async {
            let status = self.status().await?;
            for (cluster, reason) in expected {
                let actual = cluster_status(&status, cluster).map(|c| c.status.as_str());
                ensure!(
                    actual == Some(*reason),
                    "{cluster}: {actual:?} in {status:?}"
                );
            }
            Ok(status)
        })
        .await
    }

    /// Waits until the `Rollout` condition has `reason` for the current generation; returns
    /// the status.
    pub async fn wait_rollout(
        &self,
        reason: &str,
        timeout: Duration,
    ) -> anyhow::Result<FederatedStatus> {
        let what = format!("{}: Rollout {reason}", self.name);
        wait_for(timeout, &what, || async {
            let obj = self.get().await?;
            let status = FederatedStatus::from_dynamic(&obj);
            let c = status.rollout_condition().context("no Rollout condition")?;
            ensure!(
                status.observed_generation == obj.metadata.generation.unwrap_or(0)
                    && c.reason == reason,
                "Rollout {}: {}",
                c.reason,
                c.message
            );
            Ok(status)
        })
        .await
    }

    /// Waits until the Propagation condition is False with `reason`; returns the condition.
    pub async fn wait_not_propagated(&self, reason: &str) -> anyhow::Result<FederatedCondition> {
        let what = format!("{}: Propagation=False ({reason})", self.name);
        wait_for(TIMEOUT, &what, || async {
            let status = self.status().await?;
            let condition = status.propagation().context("no Propagation condition")?;
            ensure!(
                condition.status == "False" && condition.reason == reason,
                "{condition:?}"
            );
            Ok(condition.clone())
        })
        .await
    }

    /// Deletes the object (with the default delete options).
    pub async fn delete(&self) -> anyhow::Result<()> {
        self.api
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Waits until the object is gone from the host.
    pub async fn wait_gone(&self, timeout: Duration) -> anyhow::Result<()> {
        let what = format!("{} gone from the host", self.name);
        wait_for(timeout, &what, || async {
            ensure!(self.api.get_opt(&self.name).await?.is_none(), "still there");
            Ok(())
        })
        .await
    }
}

/// The status entry of `cluster`, if it has one.
pub fn cluster_status<'a>(status: &'a FederatedStatus, cluster: &str) -> Option<&'a ClusterStatus> {
    status.clusters.iter().find(|c| c.name == cluster)
}

/// The cluster names of `status.clusters`, in order.
pub fn cluster_names(status: &FederatedStatus) -> Vec<&str> {
    status.clusters.iter().map(|c| c.name.as_str()).collect()
}

/// Waits until the KubeFedClusters `names` in the host all report Ready.
pub async fn wait_clusters_ready(
    timeout: Duration,
    host: &Client,
    names: &[&str],
) -> anyhow::Result<()> {
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    wait_for(timeout, &format!("clusters {names:?} Ready"), || async {
        for name in names {
            let ready = kfcs.get(name).await?.status.is_some_and(|s| s.is_ready());
            ensure!(ready, "{name} not Ready");
        }
        Ok(())
    })
    .await
}

/// Waits until the leader Lease of the control plane names `identity` as its holder.
pub async fn wait_lease_holder(
    timeout: Duration,
    host: &Client,
    identity: &str,
) -> anyhow::Result<()> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    wait_for(
        timeout,
        &format!("the lease held by {identity}"),
        || async {
            let holder = leases
                .get(flotilla_controllers::leader::DEFAULT_LEASE_NAME)
                .await?
                .spec
                .and_then(|s| s.holder_identity);
            ensure!(holder.as_deref() == Some(identity), "holder {holder:?}");
            Ok(())
        },
    )
    .await
}
