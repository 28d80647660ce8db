//! The agent's AppliedWorks — what it applied per Work, so a restart forgets nothing — read
//! from a watch cache of the member instead of one GET per Work, corrected by what this
//! process wrote last (the agent is their only writer, so its own last write is newer than
//! a cache that has not shown it yet: a Work removed a moment after an object was applied
//! still prunes that object, and a record it deleted is not taken from a lagging cache for
//! one that still exists). What this process applied but could not record (the member API
//! server failing between the two requests) is kept here in memory, and each AppliedWork
//! names from its creation the objects its Work was to apply, so that neither a failed
//! record write nor a restart after one leaves an object behind. No I/O besides the watch.
use std::{collections::HashMap, ops::ControlFlow, sync::Arc, sync::Mutex};

use super::plan;
use flotilla_api::work::{
    APPLYING_ANNOTATION, AppliedResourceMeta, AppliedWork, ResourceIdentifier,
};
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
    /// The Work's manifests when it was created ([`APPLYING_ANNOTATION`]).
    pub intended: Vec<ResourceIdentifier>,
    /// What this process applied but could not record (in memory only): pruned with the
    /// Work all the same.
    pub unsaved: Vec<AppliedResourceMeta>,
}

/// This process's last word on an AppliedWork.
#[derive(Debug, Clone)]
enum Written {
    /// Created or recorded: what it says now.
    Saved(Record),
    /// Deleted (or found gone): absent, whatever a cache that lags still shows.
    Gone,
}

/// The AppliedWorks of one agent's Work namespace.
pub struct Records {
    store: Store<AppliedWork>,
    namespace: String,
    written: Mutex<HashMap<String, Written>>,
    unsaved: Mutex<HashMap<String, Vec<AppliedResourceMeta>>>,
}

impl Records {
    /// The records of Works in the host namespace `namespace`, from `store`.
    pub fn new(store: Store<AppliedWork>, namespace: &str) -> Self {
        Records {
            store,
            namespace: namespace.to_owned(),
            written: Mutex::default(),
            unsaved: Mutex::default(),
        }
    }

    /// The record of the Work `name`: this process's last write, else the cache's (an
    /// AppliedWork of another namespace's Work of the same name is not ours), with what
    /// this process could not record.
    pub fn get(&self, name: &str) -> Record {
        let unsaved = lock(&self.unsaved).get(name).cloned().unwrap_or_default();
        let mut written = lock(&self.written);
        let cached = self.cached(name);
        let durable = match written.get(name) {
            Some(Written::Saved(r)) => r.clone(),
            Some(Written::Gone) => {
                if cached.is_none() {
                    // The cache has caught up: the tombstone is no longer needed.
                    written.remove(name);
                }
                Record::default()
            }
            None => cached.unwrap_or_default(),
        };
        Record { unsaved, ..durable }
    }

    fn cached(&self, name: &str) -> Option<Record> {
        let a = self.store.get(&ObjectRef::new(name))?;
        record_of(&a, &self.namespace)
    }

    /// Takes over the AppliedWork `found`, which a create answered with a conflict showed
    /// to exist already (the cache had not shown it yet): what it says was applied is kept,
    /// so the round prunes and records from it rather than from nothing, and the Work's
    /// current manifests join its intended ones. `None` when it records another
    /// namespace's Work of the same name (not ours to write).
    pub fn adopt(
        &self,
        name: &str,
        found: &AppliedWork,
        intended: &[ResourceIdentifier],
    ) -> Option<Record> {
        let record = adopted(found, &self.namespace, intended)?;
        self.remember(name, record.applied.clone(), record.intended.clone());
        Some(record)
    }

    /// Remembers what this process wrote (on creation: nothing applied yet); nothing is
    /// unsaved any more.
    pub fn remember(
        &self,
        name: &str,
        applied: Vec<AppliedResourceMeta>,
        intended: Vec<ResourceIdentifier>,
    ) {
        let record = Record {
            exists: true,
            applied,
            intended,
            unsaved: Vec::new(),
        };
        lock(&self.written).insert(name.to_owned(), Written::Saved(record));
        lock(&self.unsaved).remove(name);
    }

    /// Remembers that this process wrote the record's intended objects (`record`'s), keeping
    /// what it could not record.
    pub fn remember_intended(&self, name: &str, record: &Record) {
        let saved = Record {
            unsaved: Vec::new(),
            ..record.clone()
        };
        lock(&self.written).insert(name.to_owned(), Written::Saved(saved));
    }

    /// Narrows the record of a Work being removed to what is still to prune after some of
    /// its prunes failed (`applied`, and the `intended` objects never recorded): in memory
    /// only — the AppliedWork is deleted once nothing remains — so the retry sends nothing
    /// for the objects already removed, which a member cache that lags still shows.
    pub fn still_to_prune(
        &self,
        name: &str,
        applied: Vec<AppliedResourceMeta>,
        intended: Vec<ResourceIdentifier>,
    ) {
        self.remember(name, applied, intended);
    }

    /// Remembers what this process applied for the Work but could not record.
    pub fn remember_unsaved(&self, name: &str, applied: Vec<AppliedResourceMeta>) {
        lock(&self.unsaved).insert(name.to_owned(), applied);
    }

    /// The Work's AppliedWork is gone (found so by a write): absent until created again,
    /// what could not be recorded still known.
    pub fn lost(&self, name: &str) {
        lock(&self.written).insert(name.to_owned(), Written::Gone);
    }

    /// Forgets the Work (its AppliedWork was deleted and its objects removed).
    pub fn forget(&self, name: &str) {
        let mut written = lock(&self.written);
        // Tombstones the cache has caught up with are no longer needed.
        written.retain(|n, w| matches!(w, Written::Saved(_)) || self.cached(n).is_some());
        written.insert(name.to_owned(), Written::Gone);
        lock(&self.unsaved).remove(name);
    }

    /// Whether the record of a Work other than `name` lists `id`: not the object of `name`
    /// to prune on an intention alone.
    pub fn listed_elsewhere(&self, name: &str, id: &ResourceIdentifier) -> bool {
        let listed = |r: &Record| {
            r.applied
                .iter()
                .chain(&r.unsaved)
                .any(|a| plan::same_manifest(&a.identifier, id))
        };
        let mut names = self.names();
        names.extend(lock(&self.unsaved).keys().cloned());
        names
            .iter()
            .filter(|n| *n != name)
            .any(|n| listed(&self.get(n)))
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

/// What the AppliedWork `a` records, when it is one of `namespace`'s Works.
fn record_of(a: &AppliedWork, namespace: &str) -> Option<Record> {
    if a.spec.work_namespace != namespace {
        return None;
    }
    Some(Record {
        exists: true,
        applied: a
            .status
            .as_ref()
            .map(|s| s.applied_resources.clone())
            .unwrap_or_default(),
        intended: intended(a),
        unsaved: Vec::new(),
    })
}

/// The record of an existing AppliedWork `a` of `namespace` taken over by a round that
/// is about to apply `current`: its applied objects, its intended ones and `current`'s.
fn adopted(a: &AppliedWork, namespace: &str, current: &[ResourceIdentifier]) -> Option<Record> {
    let mut record = record_of(a, namespace)?;
    for id in current {
        if !record.intended.iter().any(|i| plan::same_manifest(i, id)) {
            record.intended.push(id.clone());
        }
    }
    Some(record)
}

/// The objects its AppliedWork names as about to be applied ([`super::intent`]; none
/// when unreadable).
fn intended(a: &AppliedWork) -> Vec<ResourceIdentifier> {
    a.annotations()
        .get(APPLYING_ANNOTATION)
        .map(|v| super::intent::decode(v))
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::work::{AppliedWorkSpec, AppliedWorkStatus};

    fn id(name: &str) -> ResourceIdentifier {
        ResourceIdentifier {
            resource: "configmaps".into(),
            namespace: "app".into(),
            name: name.into(),
            ..ResourceIdentifier::default()
        }
    }

    fn applied_work(namespace: &str, intended: &[&str], applied: &[&str]) -> AppliedWork {
        let mut a = AppliedWork::new(
            "w",
            AppliedWorkSpec {
                work_name: "w".into(),
                work_namespace: namespace.into(),
            },
        );
        let ids: Vec<_> = intended.iter().map(|n| id(n)).collect();
        a.annotations_mut()
            .insert(APPLYING_ANNOTATION.into(), crate::intent::encode(&ids));
        a.status = Some(AppliedWorkStatus {
            applied_resources: applied
                .iter()
                .map(|n| AppliedResourceMeta {
                    identifier: id(n),
                    ..AppliedResourceMeta::default()
                })
                .collect(),
        });
        a
    }

    #[test]
    fn an_existing_record_is_taken_over_with_what_it_says_was_applied() {
        let a = applied_work("cluster-a", &["old", "kept"], &["old", "kept"]);
        let r = adopted(&a, "cluster-a", &[id("kept"), id("new")]).expect("ours");
        assert!(r.exists);
        let applied: Vec<_> = r
            .applied
            .iter()
            .map(|m| m.identifier.name.as_str())
            .collect();
        assert_eq!(applied, ["old", "kept"], "nothing it applied is forgotten");
        let intended: Vec<_> = r.intended.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(intended, ["old", "kept", "new"]);
    }

    #[test]
    fn a_removal_retried_names_only_what_is_still_to_prune() {
        let mut writer = reflector::store::Writer::<AppliedWork>::default();
        let a = applied_work("cluster-a", &["a", "b", "c", "never"], &["a", "b", "c"]);
        writer.apply_watcher_event(&watcher::Event::Apply(a));
        let records = Records::new(writer.as_reader(), "cluster-a");
        records.remember_unsaved("w", vec![meta("d")]);
        let before = records.get("w");
        let known = plan::known_applied(&before.applied, &before.unsaved);
        assert_eq!(names(&known), ["d", "a", "b", "c"]);
        // "b" and "never" failed to be pruned; the AppliedWork (in the cache) is unchanged.
        records.still_to_prune("w", vec![meta("b")], vec![id("never")]);
        let after = records.get("w");
        assert!(
            after.exists,
            "the AppliedWork is deleted only once all is pruned"
        );
        let known = plan::known_applied(&after.applied, &after.unsaved);
        assert_eq!(
            names(&known),
            ["b"],
            "nothing pruned already is named again"
        );
        let unrecorded = plan::unrecorded(&after.intended, &known);
        assert_eq!(unrecorded, [&id("never")]);
        assert!(records.listed_elsewhere("other", &id("b")));
        assert!(!records.listed_elsewhere("other", &id("a")));
    }

    fn meta(name: &str) -> AppliedResourceMeta {
        AppliedResourceMeta {
            identifier: id(name),
            ..AppliedResourceMeta::default()
        }
    }

    fn names(applied: &[AppliedResourceMeta]) -> Vec<&str> {
        applied.iter().map(|m| m.identifier.name.as_str()).collect()
    }

    #[test]
    fn another_namespaces_record_of_the_same_name_is_not_taken_over() {
        let a = applied_work("cluster-b", &["x"], &["x"]);
        assert_eq!(adopted(&a, "cluster-a", &[id("x")]), None);
    }
}
