//! The order of one flush's chunk writes, so that an object moving between chunks is never
//! absent from every Work the agent has seen: a chunk that loses an object is written only
//! once the chunk gaining it has been. Writes that depend on nothing go together; a chain
//! of moves (chunk 0 loses to 1, which loses to 2) is written from its end; deletions come
//! last. Moves that form a cycle (0 loses to 1 and 1 to 0) have no such order: the chunks
//! in it — and those after them — are first written holding both what they keep and what
//! they lose, then as planned. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Key,
    bundle_plan::{Chunk, ChunkWrite, entries_of, source_of, spec_of},
};

/// One stage of writes: each may go at once with the others of its stage.
pub type Stage = Vec<(usize, ChunkWrite)>;

/// The objects a planned write leaves in its chunk (none for a deletion).
fn keys_after(write: &ChunkWrite) -> BTreeSet<Key> {
    match write {
        ChunkWrite::Apply { spec } => spec.manifest_configs.iter().map(source_of).collect(),
        ChunkWrite::Delete => BTreeSet::new(),
    }
}

/// `writes` (a plan of `base`'s chunks) in stages: every chunk gaining an object written
/// in a stage before the chunk losing it.
pub fn stages(base: &BTreeMap<usize, Chunk>, writes: Vec<(usize, ChunkWrite)>) -> Vec<Stage> {
    let (mut applies, deletes): (Vec<_>, Vec<_>) =
        (writes.into_iter()).partition(|(_, w)| matches!(w, ChunkWrite::Apply { .. }));
    let before = |i: usize| base.get(&i).map(|c| c.entries.keys().cloned().collect());
    let moves: Vec<(BTreeSet<Key>, BTreeSet<Key>)> = (applies.iter())
        .map(|(i, w)| {
            let (old, new) = (before(*i).unwrap_or_default(), keys_after(w));
            let gained = new.difference(&old).cloned().collect();
            let lost = old.difference(&new).cloned().collect();
            (gained, lost)
        })
        .collect();
    // Which write gains each object, and so must precede the one that loses it.
    let gainer: BTreeMap<&Key, usize> = (moves.iter().enumerate())
        .flat_map(|(n, (gained, _))| gained.iter().map(move |k| (k, n)))
        .collect();
    let after_of = |n: usize| -> BTreeSet<usize> {
        (moves[n].1.iter())
            .filter_map(|k| gainer.get(k).copied())
            .filter(|g| *g != n)
            .collect()
    };
    let waits_on: Vec<BTreeSet<usize>> = (0..applies.len()).map(after_of).collect();
    let (layers, stuck) = layered(&waits_on);
    let mut out: Vec<Stage> = Vec::new();
    let mut taken: Vec<Option<(usize, ChunkWrite)>> = applies.drain(..).map(Some).collect();
    for layer in layers {
        out.push(layer.iter().filter_map(|n| taken[*n].take()).collect());
    }
    if !stuck.is_empty() {
        // A cycle: each chunk in it first holds what it keeps, gains and loses.
        let holding: Stage = (stuck.iter())
            .filter_map(|n| taken[*n].as_ref())
            .map(|(i, w)| (*i, holding_both(base.get(i), w)))
            .collect();
        out.push(holding);
        out.push(stuck.iter().filter_map(|n| taken[*n].take()).collect());
    }
    if !deletes.is_empty() {
        out.push(deletes);
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Kahn's layering of `waits_on` (each node's predecessors): the layers in order, and the
/// nodes left (in a cycle, or after one).
fn layered(waits_on: &[BTreeSet<usize>]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut done = vec![false; waits_on.len()];
    let mut layers = Vec::new();
    loop {
        let layer: Vec<usize> = (0..waits_on.len())
            .filter(|n| !done[*n] && waits_on[*n].iter().all(|p| done[*p]))
            .collect();
        if layer.is_empty() {
            break;
        }
        layer.iter().for_each(|n| done[*n] = true);
        layers.push(layer);
    }
    let stuck = (0..waits_on.len()).filter(|n| !done[*n]).collect();
    (layers, stuck)
}

/// The write of a chunk holding both its planned entries and those it held before.
fn holding_both(old: Option<&Chunk>, planned: &ChunkWrite) -> ChunkWrite {
    let ChunkWrite::Apply { spec, .. } = planned else {
        return planned.clone();
    };
    let mut entries = old.map(|c| c.entries.clone()).unwrap_or_default();
    entries.extend(entries_of(spec));
    ChunkWrite::Apply {
        spec: spec_of(entries.values()),
    }
}
