//! Multi-Cluster Services from a test's side: server-side apply as the tests' field
//! manager, a member's ServiceExports, and exporting a Service.

use flotilla_api::mcs::ServiceExport;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

/// The field manager of the tests' own writes.
pub const MANAGER: &str = "flotilla-tests";

/// Server-side applies `body` as `name`, taking every field it sets.
pub async fn apply<K>(api: &Api<K>, name: &str, body: Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// A member's ServiceExports in `ns` (dynamic: an export usually has no `spec`).
pub fn exports(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<ServiceExport>(&()),
    )
}

/// Exports the Service `ns/name` of a member.
pub async fn export(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    apply(
        &exports(client, ns),
        name,
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
               "metadata": {"name": name, "namespace": ns}}),
    )
    .await
}
