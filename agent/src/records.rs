//! The agent's AppliedWorks — what it applied per Work, so a restart forgets nothing — read
//! from a watch cache of the member instead of one GET per Work, corrected by what this
//! process wrote last (the agent is their only writer, so its own last write is newer than
//! a cache that has not shown it yet: a Work removed a moment after an object was applied
//! still prunes that object).

use std::{collections::HashMap, ops::ControlFlow, sync::Arc, sync::Mutex};

use flotilla_crds::work::{AppliedResourceMeta, AppliedWork};
use flotilla_multicluster::{
    watch::{Change, WatchParams, watch_into},
    workqueue::WorkQueue,
};
use kube::{
    Api, ResourceExt,
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};

/// An AppliedWork as the agent knows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    /// The AppliedWork exists (in the cache, or written by this process).
    pub exists: bool,
    /// What it says was applied.
    pub applied: Vec<AppliedResourceMeta>,
}

/// The AppliedWorks of one agent's Work namespace.
pub struct Records {
    store: Store<AppliedWork>,
    namespace: String,
    written: Mutex<HashMap<String, Vec<AppliedResourceMeta>>>,
}

impl Records {
    /// The records of Works in the host namespace `namespace`, from `store`.
    pub fn new(store: Store<AppliedWork>, namespace: &str) -> Self {
        Records {
            store,
            namespace: namespace.to_owned(),
            written: Mutex::default(),
        }
    }

    /// The record of the Work `name`: this process's last write, else the cache's (an
    /// AppliedWork of another namespace's Work of the same name is not ours).
    pub fn get(&self, name: &str) -> Record {
        if let Some(applied) = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Record {
                exists: true,
                applied: applied.clone(),
            };
        }
        match self.store.get(&ObjectRef::new(name)) {
            Some(a) if a.spec.work_namespace == self.namespace => Record {
                exists: true,
                applied: a
                    .status
                    .as_ref()
                    .map(|s| s.applied_resources.clone())
                    .unwrap_or_default(),
            },
            _ => Record::default(),
        }
    }

    /// Remembers what this process wrote (on creation: nothing applied yet).
    pub fn remember(&self, name: &str, applied: Vec<AppliedResourceMeta>) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), applied);
    }

    /// Forgets the Work (its AppliedWork was deleted).
    pub fn forget(&self, name: &str) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    /// Names of every AppliedWork of this namespace's Works.
    pub fn names(&self) -> Vec<String> {
        self.store
            .state()
            .iter()
            .filter(|a| a.spec.work_namespace == self.namespace)
            .map(|a| a.name_any())
            .collect()
    }
}

/// Feeds the AppliedWork cache; when a list completes (start, relist) every AppliedWork of
/// `namespace` is queued, so a Work deleted while the agent was away is pruned.
pub async fn watch(
    api: Api<AppliedWork>,
    writer: reflector::store::Writer<AppliedWork>,
    namespace: String,
    queue: Arc<WorkQueue<String>>,
) {
    let store = writer.as_reader();
    let params = WatchParams {
        what: "appliedwork",
        cluster: None,
        label_selector: None,
        config: watcher::Config::default(),
        failures: flotilla_multicluster::watch::FailureLog::Warn,
    };
    watch_into(
        api,
        writer,
        params,
        |_| {},
        move |change| {
            if let Change::Synced = change {
                for a in store.state() {
                    if a.spec.work_namespace == namespace {
                        queue.add(a.name_any());
                    }
                }
            }
            ControlFlow::Continue(())
        },
    )
    .await;
}
