//! This process's own bundle writes, standing in for a Work cache that has not shown them
//! yet. A flush plans from the chunks as the host holds them; when the cache lags (a busy
//! host API server can deliver watch events tens of seconds late), the chunk this process
//! just wrote would be read as it was before, and the next flush would write the older
//! content back — dropping objects from the member. So each write is remembered until the
//! cache shows it or something newer: an apply by the uid and `metadata.generation` the
//! API server answered with, a deletion until the Work is gone or terminating. Time ends a
//! stand-in only as a backstop ([`BACKSTOP`]) for a change the cache can never show — the
//! Work deleted by someone else before this process saw its own write, with the deletion
//! event lost to a relist.
//!
//! A write the cache has shown is still remembered, without its spec, until the backstop:
//! should the cache later hold that Work as it was before the write (the same uid at an
//! older generation, or the uid of a Work this process deleted), the chunk is not read from
//! it — a deleted chunk is read as gone, and a group whose chunk went back waits for the
//! cache to catch up — and the controller says so in its log. A fleet run showed such a
//! chunk, deleted 85 s before, written again from the cache's copy of it (issue #54).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use flotilla_api::work::{Work, WorkSpec};
use flotilla_multicluster::{unread::Stamp, watch::Change};
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use tracing::{info, warn};

use super::bundle_plan::{Chunk, Group, Read, entries_of, short_uid};

/// The longest a write the cache does not show stands in for it.
pub const BACKSTOP: Duration = Duration::from_secs(300);

/// What this process last did to a chunk.
#[derive(Clone, Debug, PartialEq)]
pub enum Wrote {
    /// Applied this spec; the API server answered with `stamp`.
    Applied { spec: WorkSpec, stamp: Stamp },
    /// Deleted it (the Work of this uid, when known).
    Deleted { uid: Option<String> },
}

/// Whether a Work cache shows a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// It shows the write or something newer: the cache is the truth again.
    Shown,
    /// Not yet: the write stands in for the cache.
    NotYet,
    /// Not after [`BACKSTOP`]: the write is forgotten.
    GaveUp,
}

/// Whether `cached` (the Work as a cache holds it, or the object of a watch event) shows
/// `wrote`, made `age` ago.
pub fn seen(wrote: &Wrote, cached: Option<&Work>, age: Duration) -> Seen {
    let shown = match (wrote, cached) {
        (Wrote::Applied { stamp, .. }, Some(c))
            if stamp.uid.is_some() && stamp.generation.is_some() =>
        {
            c.metadata.uid == stamp.uid && c.metadata.generation >= stamp.generation
        }
        // An answer without a version: the cache shows the spec written, or it does not.
        (Wrote::Applied { spec, .. }, Some(c)) => &c.spec == spec,
        (Wrote::Applied { .. }, None) => false,
        (Wrote::Deleted { .. }, None) => true,
        (Wrote::Deleted { .. }, Some(c)) => c.metadata.deletion_timestamp.is_some(),
    };
    match shown {
        true => Seen::Shown,
        false if age >= BACKSTOP => Seen::GaveUp,
        false => Seen::NotYet,
    }
}

/// Whether `cached` holds the Work as it was before `wrote`, a write the cache has already
/// shown: the same uid at an older generation, or the uid of the Work deleted.
pub fn went_back(wrote: &Wrote, cached: &Work) -> bool {
    let uid = match wrote {
        Wrote::Applied { stamp, .. } => &stamp.uid,
        Wrote::Deleted { uid } => uid,
    };
    if uid.is_none() || &cached.metadata.uid != uid {
        return false;
    }
    match wrote {
        Wrote::Applied { stamp, .. } => cached.metadata.generation < stamp.generation,
        Wrote::Deleted { .. } => true,
    }
}

/// A write the cache has shown becomes a mark: the write without its spec, kept to tell
/// a cache that goes back (`None`: nothing to tell it by).
fn mark_of(wrote: &Wrote) -> Option<Wrote> {
    match wrote {
        Wrote::Applied { stamp, .. } if stamp.uid.is_some() && stamp.generation.is_some() => {
            let stamp = stamp.clone();
            Some(Wrote::Applied {
                spec: WorkSpec::default(),
                stamp,
            })
        }
        Wrote::Deleted { uid: Some(_) } => Some(wrote.clone()),
        _ => None,
    }
}

#[derive(Clone, Debug)]
struct Written {
    group: Group,
    index: usize,
    wrote: Wrote,
    at: Instant,
    /// The cache has shown the write: it no longer stands in, it only marks (see
    /// [`went_back`]).
    shown: bool,
    /// The log has said the cache went back before this write.
    told: bool,
}

impl Written {
    /// The cache shows the write: a mark until the backstop, or nothing (`false`).
    fn settle(&mut self) -> bool {
        match mark_of(&self.wrote) {
            Some(mark) => {
                self.wrote = mark;
                self.shown = true;
                true
            }
            None => false,
        }
    }
}

/// What the stand-ins say of a group's chunks read from the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overlaid {
    /// A chunk of the group is older in the cache than a write of it the cache already
    /// showed: the group waits for the cache.
    pub went_back: bool,
    /// The Works watch is listing (again), or failing to: the cache holds the Works as
    /// they were when its watch ended, for as long as that lasts — longer than a write
    /// stands in ([`BACKSTOP`]). Every group waits for the list.
    pub listing: bool,
}

impl Overlaid {
    /// Whether the group waits rather than plan from what was read.
    pub fn waits(&self) -> bool {
        self.went_back || self.listing
    }
}

/// The writes of one bundler still standing in, by (cluster namespace, Work name).
#[derive(Default)]
pub struct StandIns {
    writes: Mutex<HashMap<(String, String), Written>>,
    /// Between a (re)list's start and its end (see [`Overlaid::listing`]).
    listing: AtomicBool,
}

impl StandIns {
    /// Remembers a write of chunk `index` of `group`, Work `name` in `namespace`.
    pub fn record(&self, namespace: &str, name: &str, group: &Group, index: usize, wrote: Wrote) {
        let w = Written {
            group: group.clone(),
            index,
            wrote,
            at: Instant::now(),
            shown: false,
            told: false,
        };
        lock(&self.writes).insert((namespace.to_owned(), name.to_owned()), w);
    }

    /// What stands in for Work `name` in `namespace` (for the write log): `none`, or the
    /// write kept, whether the cache showed it and its age.
    pub fn describe(&self, namespace: &str, name: &str) -> String {
        let writes = lock(&self.writes);
        let Some(w) = writes.get(&(namespace.to_owned(), name.to_owned())) else {
            return "none".to_owned();
        };
        let what = match &w.wrote {
            Wrote::Applied { stamp, .. } => format!("applied: {}", Read::own_write(stamp)),
            Wrote::Deleted { uid } => format!("deleted {}", short_uid(uid.as_deref())),
        };
        let state = if w.shown { "mark" } else { "standing" };
        format!("{state} {what} {}s ago", w.at.elapsed().as_secs())
    }

    /// A change of the Works watch (after `works` took it in): the write an event shows
    /// or follows stands in no more — a deletion by someone else included, which the cache
    /// alone would never tell from a lagging create. A listed Work ends nothing: the cache
    /// shows a list only once it completes, and until then holds the chunk as it was
    /// before the write (the next [`StandIns::overlay`] checks the cache then).
    pub fn observe(&self, change: &Change<'_, Work>, works: &Store<Work>) {
        let event = match change {
            Change::Object(event) => event,
            Change::Listing => return self.listing.store(true, Ordering::SeqCst),
            Change::Synced => return self.listing.store(false, Ordering::SeqCst),
            Change::Listed(_) => return,
        };
        let (Some(namespace), name) = (event.namespace(), event.name_any()) else {
            return;
        };
        let mut writes = lock(&self.writes);
        let key = (namespace, name);
        let Some(w) = writes.get_mut(&key) else {
            return;
        };
        let cached = works.get(&ObjectRef::new(&key.1).within(&key.0));
        let age = w.at.elapsed();
        let by_event = seen(&w.wrote, Some(event), age);
        // The event of the Work this process wrote, deleted (the cache holds it no more):
        // someone else deleted it. Its absence is not the cache going back: nothing stands
        // in for it or marks it.
        let applied = matches!(w.wrote, Wrote::Applied { .. });
        if cached.is_none() && applied && by_event == Seen::Shown {
            writes.remove(&key);
            return;
        }
        if w.shown {
            return;
        }
        let by_cache = seen(&w.wrote, cached.as_deref(), age);
        let shown = by_event == Seen::Shown || by_cache == Seen::Shown;
        if shown && w.settle() {
            return;
        }
        if by_event != Seen::NotYet || by_cache != Seen::NotYet {
            writes.remove(&key);
        }
    }

    /// Lays the writes of `group` (Works in `namespace`) the cache `works` does not show
    /// yet over its chunks `out`, read from that cache as `read` (the group's Works by
    /// name, one snapshot), and reads a chunk the cache holds as it was before a deletion it
    /// showed as gone; settles every write, of any group, the cache shows. Says whether a
    /// chunk of the group went back in the cache to before a write it showed.
    ///
    /// The group's writes are judged against `read`, not the cache as it is by now: the
    /// cache takes in events meanwhile, and a write it shows only after the chunks were
    /// read would otherwise leave the older chunk in `out` — planned from, it would undo
    /// the write (issue #54: a deleted chunk written again, an update reverted).
    pub fn overlay(
        &self,
        group: &Group,
        namespace: &str,
        works: &Store<Work>,
        read: &BTreeMap<String, Arc<Work>>,
        out: &mut BTreeMap<usize, Chunk>,
    ) -> Overlaid {
        if self.listing.load(Ordering::SeqCst) {
            return Overlaid {
                listing: true,
                ..Overlaid::default()
            };
        }
        let mut overlaid = Overlaid::default();
        let mut writes = lock(&self.writes);
        writes.retain(|(ns, name), w| {
            let ours = ns == namespace && &w.group == group;
            let cached = match ours {
                true => read.get(name).cloned(),
                false => works.get(&ObjectRef::new(name).within(ns)),
            };
            if w.shown {
                if w.at.elapsed() >= BACKSTOP {
                    return false;
                }
                if !ours {
                    return true;
                }
                let deleted = matches!(w.wrote, Wrote::Deleted { .. });
                let back = match cached.as_deref() {
                    Some(c) => went_back(&w.wrote, c).then_some(c.metadata.generation),
                    // A Work this process wrote and the cache showed, absent from it with no
                    // event of its deletion: a list older than the write (from another API
                    // server's watch cache).
                    None => (!deleted).then_some(None),
                };
                if let Some(generation) = back {
                    if !std::mem::replace(&mut w.told, true) {
                        info!(namespace = %ns, work = %name, ?generation, deleted, "the Work cache holds a bundle as it was before this process's own write it already showed; not read from it");
                    }
                    if deleted {
                        out.remove(&w.index);
                    } else {
                        overlaid.went_back = true;
                    }
                }
                return true;
            }
            match seen(&w.wrote, cached.as_deref(), w.at.elapsed()) {
                Seen::Shown => return w.settle(),
                Seen::GaveUp => {
                    warn!(namespace = %ns, work = %name, "the Work cache never showed this process's own bundle write; reading the cache again");
                    return false;
                }
                Seen::NotYet => {}
            }
            if !ours {
                return true;
            }
            match &w.wrote {
                Wrote::Applied { spec, stamp } => {
                    let chunk = Chunk {
                        entries: entries_of(spec),
                        current_metadata: true,
                        read: Read::own_write(stamp),
                    };
                    out.insert(w.index, chunk);
                }
                Wrote::Deleted { .. } if read.contains_key(name) => {
                    out.remove(&w.index);
                }
                Wrote::Deleted { .. } => {}
            }
            true
        });
        overlaid
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[path = "bundle_standins_tests.rs"]
mod tests;
