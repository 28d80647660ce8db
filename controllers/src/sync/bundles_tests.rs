use super::*;
use flotilla_api::work::{ManifestConfig, identify};

fn key(name: &str) -> Key {
    (Some("demo".to_string()), name.to_string())
}

fn entry(name: &str, data: &str) -> Entry {
    let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "demo"}, "data": {"k": data}});
    Entry {
        config: ManifestConfig {
            identifier: identify(0, &manifest),
            source_namespace: Some("demo".into()),
            source_name: name.into(),
            ..ManifestConfig::default()
        },
        manifest,
    }
}

fn upsert(name: &str, data: &str) -> (Key, Change) {
    (key(name), Change::Upsert(Box::new(entry(name, data))))
}

/// The base a flush's writes leave (as the cache would show them).
fn after(base: &BTreeMap<usize, Chunk>, writes: &[(usize, ChunkWrite)]) -> BTreeMap<usize, Chunk> {
    let mut out = base.clone();
    for (index, w) in writes {
        match w {
            ChunkWrite::Apply { spec, .. } => {
                let chunk = Chunk {
                    entries: entries_of(spec),
                    current_metadata: true,
                    ..Chunk::default()
                };
                out.insert(*index, chunk);
            }
            ChunkWrite::Delete => {
                out.remove(index);
            }
        }
    }
    out
}

#[test]
fn many_changes_at_once_are_one_write_and_the_same_changes_again_none() {
    let changes: BTreeMap<Key, Change> =
        (0..50).map(|i| upsert(&format!("cm{i:02}"), "v")).collect();
    let writes = plan_group(&BTreeMap::new(), &changes, 1 << 20);
    assert_eq!(writes.len(), 1, "50 objects, one bundle write");
    let ChunkWrite::Apply { spec } = &writes[0].1 else {
        panic!("a write, not a deletion");
    };
    assert_eq!(spec.workload.manifests.len(), 50);
    assert_eq!(spec.manifest_configs[7].identifier.ordinal, 7);
    assert_eq!(spec.manifest_configs[7].identifier.name, "cm07");
    // A restart, or a reconcile that re-sends what is written: nothing to write.
    let base = after(&BTreeMap::new(), &writes);
    assert_eq!(plan_group(&base, &changes, 1 << 20), vec![]);
    assert_eq!(plan_group(&base, &BTreeMap::new(), 1 << 20), vec![]);
}

#[test]
fn one_changed_object_rewrites_only_its_chunk_and_a_removal_empties_a_chunk() {
    let changes: BTreeMap<Key, Change> = (0..6).map(|i| upsert(&format!("cm{i}"), "v")).collect();
    let limit = 2 * entry_size(&entry("cm0", "v")) + 10;
    let base = after(
        &BTreeMap::new(),
        &plan_group(&BTreeMap::new(), &changes, limit),
    );
    assert_eq!(base.len(), 3, "six objects, two per chunk");
    let one = BTreeMap::from([upsert("cm3", "w")]);
    let writes = plan_group(&base, &one, limit);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].0, 1, "cm3 lives in chunk 1");
    let gone = BTreeMap::from([(key("cm4"), Change::Remove), (key("cm5"), Change::Remove)]);
    assert_eq!(
        plan_group(&base, &gone, limit),
        vec![(2, ChunkWrite::Delete)]
    );
}

#[test]
fn a_chunk_that_gains_an_object_is_written_before_the_one_that_loses_it() {
    let small = 2 * entry_size(&entry("a", "v")) + 10;
    let base = after(
        &BTreeMap::new(),
        &plan_group(
            &BTreeMap::new(),
            &BTreeMap::from([upsert("a", "v"), upsert("b", "v")]),
            small,
        ),
    );
    assert_eq!(base.len(), 1);
    // "a" grows past the room a chunk keeps (the largest bound). First in key order, it
    // stays (a chunk takes anything while empty); "b" no longer fits beside it and moves
    // to a new chunk 1, which is written first.
    let grown = BTreeMap::from([upsert(
        "a",
        &"x".repeat(flotilla_api::work::BUNDLE_MAX_BYTES_CEILING),
    )]);
    let writes = plan_group(&base, &grown, small);
    let held: Vec<_> = writes.iter().map(|(i, w)| (*i, names_of(w))).collect();
    assert_eq!(
        held,
        [(0, vec!["a".to_string()]), (1, vec!["b".to_string()])]
    );
    // Each in its own stage: the gaining chunk is written before the losing one starts.
    assert_eq!(indexes(&stages(&base, writes)), [vec![1], vec![0]]);
}

fn indexes(stages: &[Vec<(usize, ChunkWrite)>]) -> Vec<Vec<usize>> {
    (stages.iter())
        .map(|s| s.iter().map(|(i, _)| *i).collect())
        .collect()
}

fn chunk(names: &[&str]) -> Chunk {
    Chunk {
        entries: names.iter().map(|n| (key(n), entry(n, "v"))).collect(),
        current_metadata: true,
        ..Chunk::default()
    }
}

fn apply(names: &[&str]) -> ChunkWrite {
    let entries: Vec<Entry> = names.iter().map(|n| entry(n, "v")).collect();
    ChunkWrite::Apply {
        spec: spec_of(&entries),
    }
}

fn names_of(w: &ChunkWrite) -> Vec<String> {
    let ChunkWrite::Apply { spec, .. } = w else {
        return Vec::new();
    };
    entries_of(spec).into_keys().map(|k| k.1).collect()
}

#[test]
fn writes_that_move_nothing_go_together_and_deletions_last() {
    let base = BTreeMap::from([(0, chunk(&["a"])), (2, chunk(&["d"]))]);
    let writes = vec![
        (3, apply(&["e"])),
        (0, apply(&["a"])),
        (2, ChunkWrite::Delete),
    ];
    assert_eq!(indexes(&stages(&base, writes)), [vec![3, 0], vec![2]]);
    assert!(stages(&base, Vec::new()).is_empty());
}

#[test]
fn a_chain_of_moves_is_written_from_its_end() {
    // 0 loses "b" to 1, which loses "c" to 2: 2 first, then 1, then 0.
    let base = BTreeMap::from([(0, chunk(&["a", "b"])), (1, chunk(&["c"]))]);
    let writes = vec![(0, apply(&["a"])), (1, apply(&["b"])), (2, apply(&["c"]))];
    assert_eq!(indexes(&stages(&base, writes)), [vec![2], vec![1], vec![0]]);
}

#[test]
fn a_cycle_of_moves_first_holds_both_sides() {
    // 0 and 1 swap their objects: no order keeps both present, so each chunk is first
    // written holding both, then as planned.
    let base = BTreeMap::from([(0, chunk(&["a"])), (1, chunk(&["b"])), (2, chunk(&["c"]))]);
    let writes = vec![
        (0, apply(&["b"])),
        (1, apply(&["a"])),
        (2, apply(&["c", "d"])),
    ];
    let staged = stages(&base, writes);
    assert_eq!(indexes(&staged), [vec![2], vec![0, 1], vec![0, 1]]);
    let both: Vec<Vec<String>> = staged[1].iter().map(|(_, w)| names_of(w)).collect();
    assert_eq!(both, [["a", "b"], ["a", "b"]]);
    let planned: Vec<Vec<String>> = staged[2].iter().map(|(_, w)| names_of(w)).collect();
    assert_eq!(planned, [vec!["b"], vec!["a"]]);
}

#[test]
fn a_chunk_with_outdated_metadata_is_written_again() {
    let base = after(
        &BTreeMap::new(),
        &plan_group(
            &BTreeMap::new(),
            &BTreeMap::from([upsert("a", "v")]),
            1 << 20,
        ),
    );
    let mut stale = base.clone();
    if let Some(c) = stale.get_mut(&0) {
        c.current_metadata = false;
    }
    let change = BTreeMap::from([upsert("a", "v")]);
    assert_eq!(plan_group(&base, &change, 1 << 20), vec![]);
    assert_eq!(plan_group(&stale, &change, 1 << 20).len(), 1);
}

#[test]
fn a_manifest_whose_config_names_another_object_is_not_read_as_an_entry() {
    let mut spec = spec_of([&entry("a", "v")]);
    assert_eq!(entries_of(&spec).len(), 1);
    spec.manifest_configs[0].identifier.name = "b".into();
    assert!(entries_of(&spec).is_empty());
}

#[test]
fn the_bound_is_the_default_unless_a_positive_number_under_the_ceiling_is_given() {
    use flotilla_api::work::{BUNDLE_MAX_BYTES, BUNDLE_MAX_BYTES_CEILING};
    assert_eq!(bound_of(None), BUNDLE_MAX_BYTES);
    assert_eq!(bound_of(Some("4096")), 4096);
    assert_eq!(bound_of(Some(" 65536 ")), 65536);
    assert_eq!(bound_of(Some("0")), BUNDLE_MAX_BYTES);
    assert_eq!(bound_of(Some("lots")), BUNDLE_MAX_BYTES);
    assert_eq!(bound_of(Some("10000000")), BUNDLE_MAX_BYTES_CEILING);
}

/// Six objects, two per chunk: cm0–cm1 in chunk 0, cm2–cm3 in 1, cm4–cm5 in 2.
fn three_chunks() -> (BTreeMap<usize, Chunk>, usize) {
    let changes: BTreeMap<Key, Change> = (0..6).map(|i| upsert(&format!("cm{i}"), "v")).collect();
    let limit = 2 * entry_size(&entry("cm0", "v")) + 10;
    let base = after(
        &BTreeMap::new(),
        &plan_group(&BTreeMap::new(), &changes, limit),
    );
    assert_eq!(base.len(), 3);
    (base, limit)
}

fn keys(names: &[&str]) -> BTreeSet<Key> {
    names.iter().map(|n| key(n)).collect()
}

#[test]
fn a_chunk_whose_other_objects_wait_for_their_reconcile_is_held_and_the_others_written() {
    let (base, limit) = three_chunks();
    let changes = BTreeMap::from([upsert("cm0", "w"), upsert("cm2", "w"), upsert("cm4", "w")]);
    // cm3 (chunk 1) is queued for its reconcile: cm2's change waits for it.
    let hold = held(&base, &changes, limit, &keys(&["cm3"]), |_| false);
    assert_eq!(hold, keys(&["cm2"]));
    // Nothing waiting: nothing held.
    assert_eq!(
        held(&base, &changes, limit, &keys(&[]), |_| false),
        keys(&[])
    );
    // A waiting object of a chunk with no pending change holds nothing.
    let only_cm0 = BTreeMap::from([upsert("cm0", "w")]);
    assert_eq!(
        held(&base, &only_cm0, limit, &keys(&["cm5"]), |_| false),
        keys(&[])
    );
}

#[test]
fn a_held_chunk_is_written_once_one_of_its_changes_has_waited_long_enough() {
    let (base, limit) = three_chunks();
    let changes = BTreeMap::from([upsert("cm2", "w"), upsert("cm4", "w")]);
    let waiting = keys(&["cm3", "cm5"]);
    let overdue = |k: &Key| k.1 == "cm4";
    assert_eq!(
        held(&base, &changes, limit, &waiting, overdue),
        keys(&["cm2"])
    );
}

#[test]
fn new_objects_fill_chunks_at_once_and_the_last_one_waits_for_new_objects_still_coming() {
    let (base, limit) = three_chunks();
    // cm6 and cm7 fill chunk 3; cm8 opens chunk 4, and cm9 (new) is still queued.
    let changes: BTreeMap<Key, Change> = ["cm6", "cm7", "cm8"]
        .iter()
        .map(|n| upsert(n, "v"))
        .collect();
    let hold = held(&base, &changes, limit, &keys(&["cm9"]), |_| false);
    assert_eq!(
        hold,
        keys(&["cm8"]),
        "the full chunk goes, the open one waits"
    );
    // An object already in a chunk waiting does not hold the new ones back.
    let hold = held(&base, &changes, limit, &keys(&["cm1"]), |_| false);
    assert_eq!(hold, keys(&[]));
    // Once the open chunk's change is overdue it goes all the same.
    let overdue = |k: &Key| k.1 == "cm8";
    assert_eq!(
        held(&base, &changes, limit, &keys(&["cm9"]), overdue),
        keys(&[])
    );
}

#[test]
fn a_removal_waits_with_its_chunk() {
    let (base, limit) = three_chunks();
    let changes = BTreeMap::from([(key("cm4"), Change::Remove)]);
    assert_eq!(
        held(&base, &changes, limit, &keys(&["cm5"]), |_| false),
        keys(&["cm4"])
    );
    assert_eq!(
        held(&base, &changes, limit, &keys(&["cm1"]), |_| false),
        keys(&[])
    );
}

#[test]
fn a_write_is_described_by_the_objects_it_adds_changes_and_removes() {
    let base: BTreeMap<usize, Chunk> = [(0, chunk(&["a", "b", "c"]))].into();
    let changes: BTreeMap<Key, Change> = [
        upsert("a", "2"),
        upsert("d", "1"),
        (key("c"), Change::Remove),
    ]
    .into();
    let writes = plan_group(&base, &changes, usize::MAX);
    let [(0, ChunkWrite::Apply { spec })] = writes.as_slice() else {
        panic!("one write of chunk 0: {writes:?}");
    };
    let diff = chunk_diff(base.get(&0), spec);
    let want = ChunkDiff {
        added: 1,
        changed: 1,
        removed: 1,
    };
    assert_eq!(diff, want);
    let unchanged = chunk_diff(base.get(&0), &spec_of(base[&0].entries.values()));
    assert_eq!(unchanged, ChunkDiff::default(), "metadata alone");
    let new = chunk_diff(None, spec);
    assert_eq!((new.added, new.changed, new.removed), (3, 0, 0));
}

#[test]
fn a_chunk_read_is_logged_by_its_source_uid_and_generation() {
    let cached = Read {
        own_write: false,
        uid: Some("0123456789abcdef".into()),
        generation: Some(3),
    };
    assert_eq!(cached.to_string(), "cache 01234567 generation 3");
    let own = Read {
        own_write: true,
        uid: None,
        generation: None,
    };
    assert_eq!(own.to_string(), "own write -");
}
