//! Twins: one target type served by two federated APIs, kubefed's alpha
//! `types.kubefed.k8s.io/v1alpha1` and `types.kubefed.io/v1beta1`, each with its own sync
//! controller. Each controller also reflects the *other* API, so that an object of the same
//! namespace/name in both is propagated once: who propagates, and what deleting one does,
//! is [`flotilla_core::alpha`]'s pure decision; here it is looked up and carried out
//! (the yielding twin's status, the Events, the hand-over on deletion).
//!
//! Must not: write member objects (the propagating twin does, through the normal path).

use std::sync::Arc;

use flotilla_api::{AggregateReason, federated::FederatedStatus};
use flotilla_core::alpha::{self, FederatedApi, OnDelete, Role, Twin};
use flotilla_multicluster::packed;
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{
        events::EventType,
        reflector::{self, Store},
    },
};
use tracing::info;

use super::{
    Key,
    action::{Action, Error},
    finalizer,
    host::ApiStore,
    key_of,
    scheduled::Scheduling,
    status::{Events, StatusUpdate, StatusWriter},
    type_info::TypeInfo,
};
use crate::{
    watch::{Change, reflect_shrunk},
    workqueue::WorkQueue,
};

/// The reflectors a controller needs when kubefed's alpha API is served too: the twin
/// API's objects, and the alpha FederatedNamespaces for namespace placement.
pub(super) struct AlphaWiring {
    twin: Option<(ApiResource, reflector::store::Writer<DynamicObject>)>,
    namespaces: Option<(ApiResource, reflector::store::Writer<DynamicObject>)>,
}

impl AlphaWiring {
    pub fn new(serving: &super::Serving, needs_ns_placement: bool) -> Self {
        let writer = |ar: ApiResource| {
            let w = reflector::store::Writer::<DynamicObject>::new(ar.clone());
            (ar, w)
        };
        AlphaWiring {
            twin: serving.twin.clone().map(writer),
            namespaces: super::federated_namespace_alpha_ar()
                .filter(|_| needs_ns_placement && serving.alpha_namespaces)
                .map(writer),
        }
    }

    pub fn twin_api(&self) -> Option<ApiStore> {
        self.twin.as_ref().map(|(ar, w)| ApiStore {
            ar: ar.clone(),
            store: w.as_reader(),
        })
    }

    pub fn fns_alpha_store(&self) -> Option<Store<DynamicObject>> {
        self.namespaces.as_ref().map(|(_, w)| w.as_reader())
    }

    /// Starts the watches feeding the stores handed out above (`federated`: the cache of
    /// the objects an alpha FederatedNamespace's change requeues).
    pub fn spawn(
        self,
        host: &Client,
        federated: &Store<DynamicObject>,
        queue: &Arc<WorkQueue<Key>>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some((ar, writer)) = self.twin {
            let host = host.clone();
            tasks.push(tokio::spawn(watch_twin(host, ar, writer, queue.clone())));
        }
        if let Some((ar, writer)) = self.namespaces {
            tasks.push(tokio::spawn(super::feeds::watch_federated_namespaces(
                host.clone(),
                ar,
                federated.clone(),
                writer,
                queue.clone(),
            )));
        }
        tasks
    }
}

/// What a reconcile does about a twin.
pub(super) enum TwinCheck {
    /// No twin: the normal path.
    Alone,
    /// This object propagates; its Propagation condition carries the conflict message.
    Propagates(String),
    /// This object propagates nothing; the message says why.
    Yields(String),
}

fn twin_of<'a>(api: FederatedApi, obj: &'a DynamicObject) -> Twin<'a> {
    Twin {
        api,
        created: None,
        deleting: obj.metadata.deletion_timestamp.is_some(),
    }
}

/// `creationTimestamp` as RFC 3339 text (its serialized form), for the age comparison.
fn created(obj: &DynamicObject) -> Option<String> {
    obj.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_string))
}

/// Whether `fed` (of `ty`'s API) and its twin `other` conflict, and which propagates.
pub(super) fn check(
    ty: &TypeInfo,
    key: &Key,
    fed: &DynamicObject,
    other: Option<&DynamicObject>,
) -> TwinCheck {
    let Some(other) = other else {
        return TwinCheck::Alone;
    };
    let (own_created, other_created) = (created(fed), created(other));
    let own = Twin {
        created: own_created.as_deref(),
        ..twin_of(ty.api(), fed)
    };
    let other = Twin {
        created: other_created.as_deref(),
        ..twin_of(ty.other_api(), other)
    };
    let name = match &key.0 {
        Some(ns) => format!("{ns}/{}", key.1),
        None => key.1.clone(),
    };
    let message = alpha::conflict_message(&own, &other, &ty.fed_ar.kind, &name);
    match alpha::role(&own, &other) {
        Role::Propagates => TwinCheck::Propagates(message),
        Role::Yields => TwinCheck::Yields(message),
    }
}

/// Deleting `fed` beside its twin `other`: whether the member objects stay for it.
pub(super) fn releases_on_delete(
    ty: &TypeInfo,
    fed: &DynamicObject,
    other: Option<&DynamicObject>,
) -> bool {
    let (own_created, other_created) = (created(fed), other.and_then(created));
    let own = Twin {
        created: own_created.as_deref(),
        ..twin_of(ty.api(), fed)
    };
    let other = other.map(|o| Twin {
        created: other_created.as_deref(),
        ..twin_of(ty.other_api(), o)
    });
    alpha::on_delete(&own, other.as_ref()) == OnDelete::Release
}

/// Deleting while the twin stays (or yielded): only the finalizer goes.
pub(super) async fn release(
    host: &Client,
    ty: &TypeInfo,
    events: Events<'_>,
    fed: &DynamicObject,
) -> Result<Action, Error> {
    if finalizer::has_finalizer(fed) {
        finalizer::remove(host, ty, fed).await?;
        info!(name = %fed.name_any(), api = ty.api().as_str(), "deleted beside its twin; member objects left to the twin");
        let note = format!(
            "deleted while its {} twin exists: the member objects are left to it",
            ty.other_api().as_str()
        );
        (events.publish(fed, EventType::Normal, "HandedOver", note)).await;
    }
    Ok(Action::AwaitChange)
}

/// The yielding twin: nothing propagated, the Propagation condition says why (the
/// status write publishes the Warning when the reason first appears).
pub(super) async fn report_yielding(
    status: &StatusWriter<'_>,
    fed: &DynamicObject,
    message: String,
) -> Action {
    let previous = FederatedStatus::from_dynamic(fed);
    let update = StatusUpdate {
        previous: &previous,
        outcomes: &Default::default(),
        aggregate: Some((AggregateReason::VersionConflict, message)),
        generation: fed.metadata.generation.unwrap_or(0),
        remote: &Default::default(),
        aggregated: None,
        scheduling: Scheduling::of(None, previous.placement.is_some()),
        rollout: None,
        drift: None,
        dependencies: None,
    };
    status.write(fed, update).await;
    Action::AwaitChange
}

/// The propagating twin reports the conflict once, when its condition first says so
/// (its clusters are fine, so the status write does not publish a Warning itself).
pub(super) async fn announce_conflict(events: Events<'_>, fed: &DynamicObject, message: &str) {
    let previous = FederatedStatus::from_dynamic(fed);
    let already = previous
        .propagation()
        .is_some_and(|c| c.reason == AggregateReason::VersionConflict.as_str());
    if !already {
        let reason = AggregateReason::VersionConflict.as_str();
        (events.publish(fed, EventType::Warning, reason, message.to_string())).await;
    }
}

/// Host: the twin API's objects; a change requeues the key of the same name here.
async fn watch_twin(
    host: kube::Client,
    ar: ApiResource,
    writer: reflector::store::Writer<DynamicObject>,
    queue: Arc<WorkQueue<Key>>,
) {
    let api: Api<DynamicObject> = Api::all_with(host, &ar);
    reflect_shrunk(
        api,
        writer,
        "federated twin",
        packed::pack,
        move |c| match c {
            Change::Object(o) | Change::Listed(o) => queue.add(key_of(o)),
            Change::Listing | Change::Synced => {}
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::Scope;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn object(created: &str) -> DynamicObject {
        let mut o = DynamicObject::new(
            "web",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
        .within("demo");
        let at: k8s_openapi::jiff::Timestamp = created.parse().expect("a time");
        o.metadata.creation_timestamp = Some(Time(at));
        o
    }

    #[test]
    fn the_older_twin_propagates_and_the_younger_yields() {
        let ty = super::super::type_info::info("apps", "Deployment", Scope::Namespaced);
        let key = (Some("demo".to_string()), "web".to_string());
        let (old, new) = (
            object("2026-01-01T00:00:00Z"),
            object("2026-01-02T00:00:00Z"),
        );
        assert!(matches!(check(&ty, &key, &old, None), TwinCheck::Alone));
        assert!(matches!(
            check(&ty, &key, &old, Some(&new)),
            TwinCheck::Propagates(_)
        ));
        assert!(matches!(
            check(&ty, &key, &new, Some(&old)),
            TwinCheck::Yields(_)
        ));
    }

    #[test]
    fn deleting_beside_a_live_twin_releases_and_deleting_alone_cascades() {
        let ty = super::super::type_info::info("apps", "Deployment", Scope::Namespaced);
        let (own, other) = (
            object("2026-01-01T00:00:00Z"),
            object("2026-01-02T00:00:00Z"),
        );
        assert!(!releases_on_delete(&ty, &own, None));
        assert!(releases_on_delete(&ty, &own, Some(&other)));
    }
}
