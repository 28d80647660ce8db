//! PlacementDecisions published (KEP-5313): for every federated object the constraint
//! scheduler places, `multicluster.x-k8s.io/v1alpha1` PlacementDecision objects listing the
//! chosen clusters as ClusterProfile references, so that tools following placement (GitOps
//! engines, rollout controllers) need not know Flotilla's status format. The sync controller
//! calls [`Publisher::publish`] after each decision; [`plan`] says what to write, and a cache
//! of Flotilla's decisions keeps an unchanged decision free of writes. Owned by their
//! federated object, they are garbage-collected with it.

pub mod plan;

use std::sync::Arc;

use flotilla_api::{
    FIELD_MANAGER, federated::PlacementStatus, placement_decision::PlacementDecision,
};
use futures::FutureExt;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    core::{ApiResource, DynamicObject},
    runtime::reflector::{self, ObjectRef, Store},
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::watch::{WatchParams, watch_into};
use plan::{MANAGED_BY, MANAGED_BY_LABEL, Op, Subject};

/// What the scheduler says about one object this time.
#[derive(Clone, Copy, Debug)]
pub enum Published<'a> {
    /// The object is not scheduled: it has no decisions.
    None,
    /// The scheduler decided: publish these clusters.
    Decided(&'a PlacementStatus),
    /// No decision could be made now: leave what is published.
    Keep,
}

/// Publishes the decisions; shared by every type's sync controller.
pub struct Publisher {
    host: Client,
    store: Store<PlacementDecision>,
    control_plane_namespace: String,
    profile_namespace: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Publisher {
    /// Starts caching Flotilla's PlacementDecisions. Must be called inside a Tokio runtime.
    pub fn start(
        host: Client,
        control_plane_namespace: &str,
        profile_namespace: &str,
    ) -> Arc<Self> {
        let writer = reflector::store::Writer::<PlacementDecision>::default();
        let store = writer.as_reader();
        let mut params = WatchParams::host("placement decision");
        params.label_selector = Some(format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let api: Api<PlacementDecision> = Api::all(host.clone());
        let task = tokio::spawn(watch_into(
            api,
            writer,
            params,
            |_| {},
            |_| std::ops::ControlFlow::Continue(()),
        ));
        Arc::new(Publisher {
            host,
            store,
            control_plane_namespace: control_plane_namespace.to_string(),
            profile_namespace: profile_namespace.to_string(),
            task,
        })
    }

    /// Brings the decisions of `fed` in line with `published`. Best effort: without the
    /// PlacementDecision CRD (its cache never syncs) nothing is written, and a failed write
    /// is logged and retried at the object's next reconcile.
    pub async fn publish(&self, ar: &ApiResource, fed: &DynamicObject, published: Published<'_>) {
        let Some(subject) = self.subject(ar, fed) else {
            return;
        };
        if !matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(()))) {
            debug!("PlacementDecisions not cached (is the CRD installed?); not publishing");
            return;
        }
        let desired = match published {
            Published::Keep => return,
            Published::None => Vec::new(),
            Published::Decided(p) => plan::desired(&subject, p, &self.profile_namespace),
        };
        let current = self.current(&subject, desired.len());
        let current: Vec<Option<&PlacementDecision>> =
            current.iter().map(Option::as_deref).collect();
        for op in plan::plan(&desired, &current) {
            if let Err(e) = self.write(&subject, op).await {
                warn!(object = %subject.name, error = %e, "publishing a PlacementDecision failed");
            }
        }
    }

    fn subject(&self, ar: &ApiResource, fed: &DynamicObject) -> Option<Subject> {
        Some(Subject {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: fed.name_any(),
            uid: fed.uid()?,
            namespace: fed
                .namespace()
                .unwrap_or_else(|| self.control_plane_namespace.clone()),
        })
    }

    /// The cached slices of `subject`, by index: at least `want` entries, then on while
    /// further slices exist.
    fn current(&self, subject: &Subject, want: usize) -> Vec<Option<Arc<PlacementDecision>>> {
        let mut found = Vec::new();
        for i in 0.. {
            let key = ObjectRef::new(&subject.slice_name(i)).within(&subject.namespace);
            let slice = self.store.get(&key);
            if slice.is_none() && i >= want {
                break;
            }
            found.push(slice);
        }
        found
    }

    async fn write(&self, subject: &Subject, op: Op) -> Result<(), kube::Error> {
        let api: Api<PlacementDecision> = Api::namespaced(self.host.clone(), &subject.namespace);
        match op {
            Op::Apply(pd) => {
                let name = pd.name_any();
                let body = json!({
                    "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "PlacementDecision",
                    "metadata": {
                        "name": name,
                        "labels": pd.metadata.labels,
                        "ownerReferences": pd.metadata.owner_references,
                    },
                    "decisions": pd.decisions,
                    "schedulerName": pd.scheduler_name,
                });
                let params = PatchParams::apply(FIELD_MANAGER).force();
                api.patch(&name, &params, &Patch::Apply(&body)).await?;
                info!(decision = %name, namespace = %subject.namespace, "PlacementDecision published");
            }
            Op::Delete(name) => match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => info!(decision = %name, "PlacementDecision deleted: no longer scheduled"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            },
        }
        Ok(())
    }
}
