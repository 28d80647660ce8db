//! Assertions several tests make: an object Flotilla let go carries no managed label, an
//! object Flotilla must not touch kept its resourceVersion, and Events about an object.

use std::fmt::Debug;

use k8s_openapi::api::events::v1::Event;
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde::de::DeserializeOwned;

/// The label Flotilla puts on every member object it manages.
pub const MANAGED: &str = "kubefed.io/managed";

/// Asserts that `obj` does not carry the managed label.
#[track_caller]
pub fn assert_unmanaged(obj: &impl ResourceExt, what: &str) {
    assert_eq!(
        obj.labels().get(MANAGED),
        None,
        "{what}: {} still labelled managed",
        obj.name_any()
    );
}

/// Asserts that `name` in `api` is still at `before`'s resourceVersion.
pub async fn assert_unchanged<K>(api: &Api<K>, before: &K, what: &str) -> anyhow::Result<()>
where
    K: Clone + DeserializeOwned + Debug + ResourceExt,
{
    let now = api.get(&before.name_any()).await?;
    assert_eq!(
        now.resource_version(),
        before.resource_version(),
        "{what}: {} was modified",
        before.name_any()
    );
    Ok(())
}

/// The Events in namespace `ns` with `reason` about the object named `regarding`.
pub async fn events_about(
    client: &Client,
    ns: &str,
    regarding: &str,
    reason: &str,
) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
        .collect())
}
