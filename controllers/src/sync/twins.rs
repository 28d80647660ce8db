//! Twins: one target type served by two federated APIs, kubefed's alpha
//! `types.kubefed.k8s.io/v1alpha1` and `types.kubefed.io/v1beta1`, each with its own sync
//! controller. Each controller also reflects the *other* API, so that an object of the same
//! namespace/name in both is propagated once: who propagates, and what deleting one does,
//! is [`flotilla_crds::alpha`]'s pure decision; here it is looked up and carried out
//! (the yielding twin's status, the Events, the hand-over on deletion).
//!
//! Must not: write member objects (the propagating twin does, through the normal path).

use std::sync::Arc;

use flotilla_crds::{
    AggregateReason,
    alpha::{self, FederatedApi, OnDelete, Role, Twin},
    federated::FederatedStatus,
};
use kube::{
    Api, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{
        events::EventType,
        reflector::{self, ObjectRef, Store},
    },
};
use tracing::info;

use super::{
    Key,
    action::{Action, Error},
    ctl::{Ctl, TwinApi},
    key_of,
    scheduled::Scheduling,
    status::StatusUpdate,
};
use crate::{
    watch::{Change, reflect},
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

    pub fn twin_api(&self) -> Option<TwinApi> {
        self.twin.as_ref().map(|(ar, w)| TwinApi {
            ar: ar.clone(),
            store: w.as_reader(),
        })
    }

    pub fn fns_alpha_store(&self) -> Option<Store<DynamicObject>> {
        self.namespaces.as_ref().map(|(_, w)| w.as_reader())
    }

    /// Starts the watches feeding the stores handed out above.
    pub fn spawn(
        self,
        ctl: &Arc<Ctl>,
        queue: &Arc<WorkQueue<Key>>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some((ar, writer)) = self.twin {
            let host = ctl.shared.host.clone();
            tasks.push(tokio::spawn(watch_twin(host, ar, writer, queue.clone())));
        }
        if let Some((ar, writer)) = self.namespaces {
            tasks.push(tokio::spawn(super::watch_federated_namespaces(
                ctl.clone(),
                ar,
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

impl Ctl {
    /// The API this controller serves.
    pub(super) fn api(&self) -> FederatedApi {
        FederatedApi::of(&flotilla_crds::core::ApiResource {
            group: self.fed_ar.group.clone(),
            version: self.fed_ar.version.clone(),
            kind: self.fed_ar.kind.clone(),
            plural_name: self.fed_ar.plural.clone(),
            scope: flotilla_crds::core::Scope::Namespaced,
        })
    }

    /// The other API's object of the same key, if that API is served and it exists.
    pub(super) fn twin(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        let twin = self.twin.as_ref()?;
        let mut obj_ref = ObjectRef::<DynamicObject>::new_with(&key.1, twin.ar.clone());
        if let Some(ns) = &key.0 {
            obj_ref = obj_ref.within(ns);
        }
        twin.store.get(&obj_ref)
    }

    fn other_api(&self) -> FederatedApi {
        match self.api() {
            FederatedApi::V1beta1 => FederatedApi::V1alpha1,
            FederatedApi::V1alpha1 => FederatedApi::V1beta1,
        }
    }

    /// Whether this object and its twin conflict, and which propagates.
    pub(super) fn check_twin(&self, key: &Key, fed: &DynamicObject) -> TwinCheck {
        let Some(other) = self.twin(key) else {
            return TwinCheck::Alone;
        };
        let (own_created, other_created) = (created(fed), created(&other));
        let own = Twin {
            created: own_created.as_deref(),
            ..twin_of(self.api(), fed)
        };
        let other = Twin {
            created: other_created.as_deref(),
            ..twin_of(self.other_api(), &other)
        };
        let name = match &key.0 {
            Some(ns) => format!("{ns}/{}", key.1),
            None => key.1.clone(),
        };
        let message = alpha::conflict_message(&own, &other, &self.fed_ar.kind, &name);
        match alpha::role(&own, &other) {
            Role::Propagates => TwinCheck::Propagates(message),
            Role::Yields => TwinCheck::Yields(message),
        }
    }

    /// Deleting with a twin: whether the member objects stay for it.
    pub(super) fn releases_on_delete(&self, key: &Key, fed: &DynamicObject) -> bool {
        let other = self.twin(key);
        let (own_created, other_created) = (created(fed), other.as_deref().and_then(created));
        let own = Twin {
            created: own_created.as_deref(),
            ..twin_of(self.api(), fed)
        };
        let other = other.as_deref().map(|o| Twin {
            created: other_created.as_deref(),
            ..twin_of(self.other_api(), o)
        });
        alpha::on_delete(&own, other.as_ref()) == OnDelete::Release
    }

    /// Deleting while the twin stays (or yielded): only the finalizer goes.
    pub(super) async fn release(&self, fed: &DynamicObject) -> Result<Action, Error> {
        if super::deletion::has_finalizer(fed) {
            self.remove_finalizer(fed).await?;
            info!(name = %fed.name_any(), api = self.api().as_str(), "deleted beside its twin; member objects left to the twin");
            let note = format!(
                "deleted while its {} twin exists: the member objects are left to it",
                self.other_api().as_str()
            );
            self.event(fed, EventType::Normal, "HandedOver", note).await;
        }
        Ok(Action::AwaitChange)
    }

    /// The yielding twin: nothing propagated, the Propagation condition says why (the
    /// status write publishes the Warning when the reason first appears).
    pub(super) async fn report_yielding(&self, fed: &DynamicObject, message: String) -> Action {
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
        };
        self.write_status(fed, update).await;
        Action::AwaitChange
    }

    /// The propagating twin reports the conflict once, when its condition first says so
    /// (its clusters are fine, so the status write does not publish a Warning itself).
    pub(super) async fn announce_conflict(&self, fed: &DynamicObject, message: &str) {
        let previous = FederatedStatus::from_dynamic(fed);
        let already = previous
            .propagation()
            .is_some_and(|c| c.reason == AggregateReason::VersionConflict.as_str());
        if !already {
            self.event(
                fed,
                EventType::Warning,
                AggregateReason::VersionConflict.as_str(),
                message.to_string(),
            )
            .await;
        }
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
    reflect(api, writer, "federated twin", move |c| match c {
        Change::Object(o) => queue.add(key_of(o)),
        Change::Synced => {}
    })
    .await;
}
