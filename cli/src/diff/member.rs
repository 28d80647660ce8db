//! The member side of `flotilla diff`: the registered clusters with a client each, built
//! from KubeFedCluster + token Secret exactly as the registry builds them
//! ([`flotilla_controllers::registry::client::ClientInputs`]), the live object in a member, and the
//! controller's apply run there as a server-side dry run (`dryRun=All`, field manager
//! `flotilla`, forced as the controller forces it), so defaults and field ownership are
//! the member's own. It never writes.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{FIELD_MANAGER, KubeFedCluster, MANAGED_LABEL};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::Value;

use super::plan::Live;
use flotilla_controllers::{multicluster::ClusterState, registry::client::ClientInputs};

/// How long one member call may take before its cluster is reported as failed.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(15);

/// Every KubeFedCluster in the control-plane namespace as the control plane sees it:
/// labels, Ready condition, and a client when one can be built (`None` otherwise).
pub async fn clusters(host: &Client, kubefed_ns: &str) -> anyhow::Result<Vec<ClusterState>> {
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), kubefed_ns);
    let secrets: Api<Secret> = Api::namespaced(host.clone(), kubefed_ns);
    let list = kfcs
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the KubeFedClusters in {kubefed_ns}"))?;
    let mut out = Vec::new();
    for kfc in list.items {
        let secret = secrets
            .get_opt(&kfc.spec.secret_ref.name)
            .await
            .with_context(|| format!("reading the token Secret of cluster {}", kfc.name_any()))?;
        let inputs = ClientInputs::new(&kfc.spec, kubefed_ns, secret.as_ref());
        out.push(ClusterState {
            name: kfc.name_any(),
            labels: kfc.labels().clone(),
            ready: kfc.status.as_ref().is_some_and(|s| s.is_ready()),
            taints: kfc.spec.taints.clone(),
            client: inputs.client().ok(),
            client_generation: 0,
            pull: kfc.spec.is_pull(),
        });
    }
    Ok(out)
}

/// Where the member object lives in one member.
pub struct MemberObject<'a> {
    /// The target type.
    pub api: &'a kube::core::ApiResource,
    /// Its namespace, for namespaced targets.
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
}

impl MemberObject<'_> {
    fn api(&self, client: &Client) -> Api<DynamicObject> {
        match self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, self.api),
            None => Api::all_with(client.clone(), self.api),
        }
    }

    /// The live object in the member.
    pub async fn live(&self, client: &Client) -> anyhow::Result<Live> {
        let found = tokio::time::timeout(MEMBER_TIMEOUT, self.api(client).get_opt(self.name))
            .await
            .context("no answer within 15s")?
            .context("reading the live object")?;
        Ok(match found {
            None => Live::Absent,
            Some(obj) => Live::Present {
                managed: obj.labels().get(MANAGED_LABEL).is_some_and(|v| v == "true"),
                object: serde_json::to_value(&obj)?,
            },
        })
    }

    /// The object the member would store after the controller's apply of `desired`
    /// (a dry run: nothing is written). `Ok(None)` when the member cannot say because the
    /// object's namespace does not exist there yet (it would be propagated first).
    pub async fn dry_run_apply(
        &self,
        client: &Client,
        desired: &Value,
    ) -> anyhow::Result<Option<Value>> {
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = true;
        let api = self.api(client);
        let patch = Patch::Apply(desired);
        match tokio::time::timeout(MEMBER_TIMEOUT, api.patch(self.name, &params, &patch))
            .await
            .context("no answer within 15s")?
        {
            Ok(obj) => Ok(Some(serde_json::to_value(&obj)?)),
            Err(kube::Error::Api(e)) if e.code == 404 && self.namespace.is_some() => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context("dry-run apply")),
        }
    }
}
