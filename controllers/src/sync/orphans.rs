//! Member objects an orphaning deletion could not reach: when a federated object annotated
//! `kubefed.io/orphan=true` is deleted while a member is unreachable for longer than the
//! unready-cluster deletion timeout, the finalizer goes without the member being asked, and
//! the member's copy still carries `kubefed.io/managed=true`. When the member returns, that
//! copy looks exactly like a stray (a managed object without a federated object), and the
//! stray cleaner used to delete it — the one thing the user asked not to happen. This
//! record remembers which (type, object, cluster) were left behind by an orphaning
//! deletion, so the stray cleaner only unlabels them ([`stray_op`]).
//!
//! The record lives in the controller-manager's memory, shared by every sync controller
//! (it outlives a type's controller restart and a lost lease in the same process, not a
//! process restart). It holds one entry per abandoned cluster and object, dropped once the
//! member object is unlabelled or a federated object of the same name exists again.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Mutex,
};

use super::Key;

/// What the stray cleaner does with a managed member object whose federated object is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrayOp {
    /// Delete it: the federated object was deleted without orphaning.
    Delete,
    /// Only remove the managed label: a namespace that must never be deleted, or an
    /// object whose orphaning deletion gave up on this cluster.
    Unlabel,
}

/// Decides a stray: `protected` (a namespace Flotilla never deletes), `orphaned` (an
/// orphaning deletion left it behind in this cluster).
pub fn stray_op(protected: bool, orphaned: bool) -> StrayOp {
    if protected || orphaned {
        StrayOp::Unlabel
    } else {
        StrayOp::Delete
    }
}

/// The clusters to remember for an object after its deletion gave up on `abandoned`: an
/// orphaning deletion adds them; any other deletion forgets them (a newer, non-orphaning
/// deletion of a same-named object wins over an older record).
pub fn after_deletion(
    mut remembered: BTreeSet<String>,
    abandoned: &[String],
    orphaning: bool,
) -> BTreeSet<String> {
    for cluster in abandoned {
        if orphaning {
            remembered.insert(cluster.clone());
        } else {
            remembered.remove(cluster);
        }
    }
    remembered
}

/// The record: (federated kind, key) → clusters where the member object must be kept.
#[derive(Debug, Default)]
pub struct Orphans {
    left: Mutex<BTreeMap<(String, Key), BTreeSet<String>>>,
}

impl Orphans {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<(String, Key), BTreeSet<String>>) -> T) -> T {
        f(&mut self.left.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A deletion of `kind` `key` finished, giving up on `abandoned`.
    pub fn deleted(&self, kind: &str, key: &Key, abandoned: &[String], orphaning: bool) {
        if abandoned.is_empty() {
            return;
        }
        self.with(|left| {
            let id = (kind.to_owned(), key.clone());
            let previous = left.remove(&id).unwrap_or_default();
            let now = after_deletion(previous, abandoned, orphaning);
            if !now.is_empty() {
                left.insert(id, now);
            }
        });
    }

    /// Whether an orphaning deletion left `key` behind in `cluster`.
    pub fn is_orphaned(&self, kind: &str, key: &Key, cluster: &str) -> bool {
        self.with(|left| {
            left.get(&(kind.to_owned(), key.clone()))
                .is_some_and(|clusters| clusters.contains(cluster))
        })
    }

    /// The member object in `cluster` was unlabelled: nothing is left to keep there.
    pub fn kept(&self, kind: &str, key: &Key, cluster: &str) {
        self.with(|left| {
            let id = (kind.to_owned(), key.clone());
            if let Some(clusters) = left.get_mut(&id) {
                clusters.remove(cluster);
                if clusters.is_empty() {
                    left.remove(&id);
                }
            }
        });
    }

    /// A federated object of this name exists again: its own deletion decides from now on.
    pub fn forget(&self, kind: &str, key: &Key) {
        self.with(|left| {
            if !left.is_empty() {
                left.remove(&(kind.to_owned(), key.clone()));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        (Some("demo".into()), "web".into())
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_stray_is_deleted_unless_protected_or_left_by_an_orphaning_deletion() {
        assert_eq!(stray_op(false, false), StrayOp::Delete);
        assert_eq!(stray_op(true, false), StrayOp::Unlabel);
        assert_eq!(stray_op(false, true), StrayOp::Unlabel);
    }

    #[test]
    fn an_orphaning_deletion_remembers_the_clusters_it_gave_up_on() {
        let after = after_deletion(BTreeSet::new(), &names(&["m2"]), true);
        assert_eq!(after, BTreeSet::from(["m2".to_string()]));
        let orphans = Orphans::default();
        orphans.deleted("FederatedConfigMap", &key(), &names(&["m2"]), true);
        assert!(orphans.is_orphaned("FederatedConfigMap", &key(), "m2"));
        assert!(!orphans.is_orphaned("FederatedConfigMap", &key(), "m1"));
        assert!(!orphans.is_orphaned("FederatedSecret", &key(), "m2"));
    }

    #[test]
    fn a_later_deletion_without_orphaning_forgets_the_clusters_it_gave_up_on() {
        let before = BTreeSet::from(["m1".to_string(), "m2".to_string()]);
        let after = after_deletion(before, &names(&["m2"]), false);
        assert_eq!(after, BTreeSet::from(["m1".to_string()]));
    }

    #[test]
    fn a_deletion_that_gave_up_on_nothing_records_nothing() {
        let orphans = Orphans::default();
        orphans.deleted("FederatedConfigMap", &key(), &[], true);
        assert!(orphans.with(|left| left.is_empty()));
    }

    #[test]
    fn an_unlabelled_object_or_a_new_federated_object_ends_the_record() {
        let orphans = Orphans::default();
        orphans.deleted("FederatedConfigMap", &key(), &names(&["m1", "m2"]), true);
        orphans.kept("FederatedConfigMap", &key(), "m1");
        assert!(!orphans.is_orphaned("FederatedConfigMap", &key(), "m1"));
        assert!(orphans.is_orphaned("FederatedConfigMap", &key(), "m2"));
        orphans.forget("FederatedConfigMap", &key());
        assert!(!orphans.is_orphaned("FederatedConfigMap", &key(), "m2"));
        orphans.kept("FederatedConfigMap", &key(), "m2");
        assert!(orphans.with(|left| left.is_empty()));
    }
}
