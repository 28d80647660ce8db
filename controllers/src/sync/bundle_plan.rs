//! The pure decision of a bundle write: what a group's chunks become once its pending
//! changes are applied under the split rule (`flotilla_core::bundle::assign_keeping`), and
//! which chunk writes that takes, in which order.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::work::{BUNDLE_MAX_BYTES_CEILING, ManifestConfig, WorkSpec, identify};
use flotilla_core::bundle::{Item, assign_keeping};
use flotilla_multicluster::unread::Stamp;
use serde_json::Value;

use super::Key;

/// A bundle group: a Pull cluster and a federated namespace (`None`: cluster-scoped).
pub type Group = (String, Option<String>);

/// One object's part of a bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The member object (its hash annotation records the content).
    pub manifest: Value,
    /// Its source and drift policy, or its orphaning.
    pub config: ManifestConfig,
}

/// A pending change of one object in its group.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The object's manifest is this.
    Upsert(Box<Entry>),
    /// The object leaves the cluster (the agent prunes it).
    Remove,
}

/// One chunk of a group as the host holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunk {
    /// Its entries by object.
    pub entries: BTreeMap<Key, Entry>,
    /// Whether its metadata is what this version writes (else it is written again).
    pub current_metadata: bool,
    /// Where it was read from, for the log.
    pub read: Read,
}

/// Where a chunk was read from: the Work cache or this process's own write standing in,
/// and the Work's uid and `metadata.generation` there (each when known).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Read {
    pub own_write: bool,
    pub uid: Option<String>,
    pub generation: Option<i64>,
}

impl Read {
    /// A chunk as this process's own write left it (the API server's answer).
    pub fn own_write(stamp: &Stamp) -> Read {
        Read {
            own_write: true,
            uid: stamp.uid.clone(),
            generation: stamp.generation,
        }
    }
}

/// A uid's first 8 characters (`-` when unknown), enough to tell Works apart in a log.
pub fn short_uid(uid: Option<&str>) -> &str {
    let uid = uid.unwrap_or("-");
    uid.get(..8).unwrap_or(uid)
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = if self.own_write { "own write" } else { "cache" };
        let uid = short_uid(self.uid.as_deref());
        match self.generation {
            Some(g) => write!(f, "{from} {uid} generation {g}"),
            None => write!(f, "{from} {uid}"),
        }
    }
}

/// What to do with one chunk.
#[derive(Clone, Debug, PartialEq)]
pub enum ChunkWrite {
    /// Write the chunk with this spec.
    Apply { spec: WorkSpec },
    /// Delete the emptied chunk.
    Delete,
}

/// The spec of a chunk holding `entries` (in key order; the configs follow the manifests).
pub fn spec_of<'e>(entries: impl IntoIterator<Item = &'e Entry>) -> WorkSpec {
    let mut spec = WorkSpec::default();
    for (i, e) in entries.into_iter().enumerate() {
        let mut config = e.config.clone();
        config.identifier = identify(i, &e.manifest);
        spec.workload.manifests.push(e.manifest.clone());
        spec.manifest_configs.push(config);
    }
    spec
}

/// The pure decision of one flush of a group: `base`, its chunks as held now (by chunk
/// number); `changes`, the pending changes; `limit`, the bound of one chunk. Returns the
/// writes by chunk number (`super::bundle_order::stages` says in which order to make
/// them); an unchanged chunk is not written.
pub fn plan_group(
    base: &BTreeMap<usize, Chunk>,
    changes: &BTreeMap<Key, Change>,
    limit: usize,
) -> Vec<(usize, ChunkWrite)> {
    let chunks = regroup(base, changes, limit);
    let indexes: BTreeSet<usize> = base.keys().chain(chunks.keys()).copied().collect();
    let mut writes = Vec::new();
    for index in indexes {
        let old = base.get(&index);
        match chunks.get(&index) {
            None => writes.push((index, ChunkWrite::Delete)),
            Some(new) => {
                let spec = spec_of(new.values().copied());
                let unchanged =
                    old.is_some_and(|o| o.current_metadata && spec_of(o.entries.values()) == spec);
                if !unchanged {
                    writes.push((index, ChunkWrite::Apply { spec }));
                }
            }
        }
    }
    writes
}

/// A group's chunks: by chunk number, each entry by its object.
type Regrouped<'a> = BTreeMap<usize, BTreeMap<&'a Key, &'a Entry>>;

/// The group's chunks once `changes` are applied to `base` under the split rule.
fn regroup<'a>(
    base: &'a BTreeMap<usize, Chunk>,
    changes: &'a BTreeMap<Key, Change>,
    limit: usize,
) -> Regrouped<'a> {
    let mut entries: BTreeMap<&Key, (Option<usize>, &Entry)> = BTreeMap::new();
    for (index, chunk) in base {
        for (key, e) in &chunk.entries {
            entries.insert(key, (Some(*index), e));
        }
    }
    for (key, change) in changes {
        match change {
            Change::Upsert(e) => {
                let current = entries.get(key).and_then(|(c, _)| *c);
                entries.insert(key, (current, &**e));
            }
            Change::Remove => {
                entries.remove(key);
            }
        }
    }
    let items: Vec<Item<&Key>> = entries
        .iter()
        .map(|(key, (current, e))| Item {
            key: *key,
            size: entry_size(e),
            current: *current,
        })
        .collect();
    let mut chunks: Regrouped<'a> = BTreeMap::new();
    for (key, index) in assign_keeping(&items, limit, BUNDLE_MAX_BYTES_CEILING) {
        if let Some((_, e)) = entries.remove(key) {
            chunks.entry(index).or_default().insert(key, e);
        }
    }
    chunks
}

/// Which pending changes of a group wait for the ones still coming, so that a stream of
/// changes rewrites each chunk once rather than once per flush. `waiting`: the group's
/// objects whose reconcile is queued or under way (a change may follow) and that have no
/// change pending yet; `overdue(key)`: whether the key's change has waited long enough.
///
/// A chunk the changes would rewrite waits while one of its own objects is waiting, and
/// the last chunk taking new objects while a new object (in no chunk yet) is waiting —
/// unless one of the chunk's changes is overdue. A change waits when a chunk it touches
/// (the one holding it now, the one it goes to) waits. Pure.
pub fn held(
    base: &BTreeMap<usize, Chunk>,
    changes: &BTreeMap<Key, Change>,
    limit: usize,
    waiting: &BTreeSet<Key>,
    overdue: impl Fn(&Key) -> bool,
) -> BTreeSet<Key> {
    let before: BTreeMap<&Key, usize> = (base.iter())
        .flat_map(|(i, c)| c.entries.keys().map(move |k| (k, *i)))
        .collect();
    let new_waiting = waiting.iter().any(|w| !before.contains_key(w));
    let mut waits: BTreeSet<usize> = waiting
        .iter()
        .filter_map(|w| before.get(w).copied())
        .collect();
    if waits.is_empty() && !new_waiting {
        // Nothing of the group waits: no chunk is held (and no regrouping is needed).
        return BTreeSet::new();
    }
    let after: BTreeMap<&Key, usize> = (regroup(base, changes, limit).into_iter())
        .flat_map(|(i, c)| c.into_keys().map(move |k| (k, i)))
        .collect();
    let touched = |key: &Key| -> Vec<usize> {
        let mut t: Vec<usize> = [before.get(key), after.get(key)]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        t.dedup();
        t
    };
    let tail = (changes.keys())
        .filter(|k| !before.contains_key(k))
        .filter_map(|k| after.get(k).copied())
        .max();
    if new_waiting {
        waits.extend(tail);
    }
    for key in changes.keys().filter(|k| overdue(k)) {
        for chunk in touched(key) {
            waits.remove(&chunk);
        }
    }
    (changes.keys())
        .filter(|k| touched(k).iter().any(|c| waits.contains(c)))
        .cloned()
        .collect()
}

/// Bytes of JSON one entry adds to a chunk.
pub fn entry_size(e: &Entry) -> usize {
    serde_json::to_vec(&e.manifest).map_or(0, |v| v.len())
        + serde_json::to_vec(&e.config).map_or(0, |v| v.len())
}

/// The entries of a bundle Work, by the object each renders (manifests without a config
/// naming their source are left out: the next write of the chunk drops them).
pub fn entries_of(spec: &WorkSpec) -> BTreeMap<Key, Entry> {
    let mut out = BTreeMap::new();
    for (i, manifest) in spec.workload.manifests.iter().enumerate() {
        let Some(config) = spec.manifest_configs.get(i) else {
            continue;
        };
        if !flotilla_api::work::same_object(&config.identifier, &identify(i, manifest)) {
            continue;
        }
        let key = source_of(config);
        // As a reconcile makes it (ordinal 0): sizes and comparisons do not depend on
        // where the manifest sits.
        let mut config = config.clone();
        config.identifier = identify(0, manifest);
        let entry = Entry {
            manifest: manifest.clone(),
            config,
        };
        out.insert(key, entry);
    }
    out
}

/// The object (federated key) a manifest's config names as its source.
pub fn source_of(config: &ManifestConfig) -> Key {
    (config.source_namespace.clone(), config.source_name.clone())
}

/// How a chunk write differs from the chunk as it was read: objects added, changed (a
/// new manifest or config) and removed; all zero for a write of its metadata alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkDiff {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
}

/// What writing `spec` over `old` changes.
pub fn chunk_diff(old: Option<&Chunk>, spec: &WorkSpec) -> ChunkDiff {
    let empty = BTreeMap::new();
    let old = old.map_or(&empty, |c| &c.entries);
    let new = entries_of(spec);
    let mut diff = ChunkDiff::default();
    for (key, entry) in &new {
        match old.get(key) {
            None => diff.added += 1,
            Some(o) if o != entry => diff.changed += 1,
            Some(_) => {}
        }
    }
    diff.removed = old.keys().filter(|k| !new.contains_key(*k)).count();
    diff
}
