//! The sync finalizer on a federated object: added before anything is propagated, removed
//! once its member objects are gone (or left to a twin). Every patch is guarded by a test
//! of the current list, so a concurrent change of the finalizers is never overwritten.

use flotilla_api::SYNC_FINALIZER;
use flotilla_multicluster::unread;
use kube::{
    Client, ResourceExt,
    api::{Patch, PatchParams},
    core::DynamicObject,
};
use serde_json::json;

use super::{action::Error, type_info::TypeInfo};

/// Whether the object carries the sync finalizer.
pub(super) fn has_finalizer(fed: &DynamicObject) -> bool {
    fed.finalizers().iter().any(|f| f == SYNC_FINALIZER)
}

/// Adds the sync finalizer, guarded by a test of the current list so a concurrent
/// change of the finalizers is never overwritten.
pub(super) async fn add(host: &Client, ty: &TypeInfo, fed: &DynamicObject) -> Result<(), Error> {
    let patch = match &fed.metadata.finalizers {
        // No list to test: the version is, so a list someone added since is not replaced.
        None => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": fed.resource_version()},
            {"op": "add", "path": "/metadata/finalizers", "value": [SYNC_FINALIZER]}
        ]),
        Some(list) => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": SYNC_FINALIZER}
        ]),
    };
    patch_finalizers(host, ty, fed, patch).await
}

/// Removes the sync finalizer (guarded like [`add`]); an object already
/// gone is fine.
pub(super) async fn remove(host: &Client, ty: &TypeInfo, fed: &DynamicObject) -> Result<(), Error> {
    let list = fed.metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = list.iter().filter(|f| *f != SYNC_FINALIZER).collect();
    let patch = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": list},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept}
    ]);
    match patch_finalizers(host, ty, fed, patch).await {
        Err(Error::Finalizer(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        other => other,
    }
}

async fn patch_finalizers(
    host: &Client,
    ty: &TypeInfo,
    fed: &DynamicObject,
    patch: serde_json::Value,
) -> Result<(), Error> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|e| Error::Finalizer(kube::Error::SerdeError(e)))?;
    let api = ty.host_api(host.clone(), fed.metadata.namespace.as_deref());
    let name = fed.name_any();
    unread::patch(
        &api,
        &name,
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(Error::Finalizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_object_carrying_the_sync_finalizer_has_it() {
        let mut o = DynamicObject::new(
            "a",
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        assert!(!has_finalizer(&o));
        o.metadata.finalizers = Some(vec!["other".into(), SYNC_FINALIZER.into()]);
        assert!(has_finalizer(&o));
    }
}
