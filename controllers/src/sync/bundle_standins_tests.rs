use super::*;
use flotilla_api::work::{ManifestConfig, identify};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::{reflector::store::Writer, watcher::Event};
use serde_json::json;

fn work(uid: &str, generation: i64) -> Work {
    let mut w = Work::new("b-0", WorkSpec::default());
    w.metadata.namespace = Some("flotilla-cluster-m1".into());
    w.metadata.uid = Some(uid.into());
    w.metadata.generation = Some(generation);
    w
}

fn applied(uid: &str, generation: i64) -> Wrote {
    applied_spec(WorkSpec::default(), uid, generation)
}

fn applied_spec(spec: WorkSpec, uid: &str, generation: i64) -> Wrote {
    let stamp = Stamp {
        uid: Some(uid.into()),
        generation: Some(generation),
    };
    Wrote::Applied { spec, stamp }
}

const NOW: Duration = Duration::ZERO;

#[test]
fn an_apply_stands_in_until_the_cache_shows_its_generation_however_long_it_lags() {
    let wrote = applied("u1", 3);
    assert_eq!(seen(&wrote, Some(&work("u1", 2)), NOW), Seen::NotYet);
    // The old 30 s time-to-live would have given up here and read the older chunk.
    let lagging = Duration::from_secs(90);
    assert_eq!(seen(&wrote, Some(&work("u1", 2)), lagging), Seen::NotYet);
    assert_eq!(
        seen(&wrote, None, lagging),
        Seen::NotYet,
        "a create not seen yet"
    );
    assert_eq!(seen(&wrote, Some(&work("u1", 3)), lagging), Seen::Shown);
    assert_eq!(
        seen(&wrote, Some(&work("u1", 5)), NOW),
        Seen::Shown,
        "newer"
    );
    assert_eq!(seen(&wrote, Some(&work("u1", 2)), BACKSTOP), Seen::GaveUp);
}

#[test]
fn an_older_incarnation_of_the_work_does_not_show_a_write_to_the_new_one() {
    let wrote = applied("u2", 1);
    assert_eq!(seen(&wrote, Some(&work("u1", 7)), NOW), Seen::NotYet);
    assert_eq!(seen(&wrote, Some(&work("u2", 1)), NOW), Seen::Shown);
}

#[test]
fn an_answer_without_a_version_is_compared_by_spec() {
    let spec = WorkSpec::default();
    let wrote = Wrote::Applied {
        spec: spec.clone(),
        stamp: Stamp::default(),
    };
    assert_eq!(seen(&wrote, Some(&work("u1", 1)), NOW), Seen::Shown);
    let mut other = work("u1", 2);
    other.spec.manifest_configs.push(Default::default());
    assert_eq!(seen(&wrote, Some(&other), NOW), Seen::NotYet);
}

#[test]
fn a_deletion_stands_in_until_the_work_is_gone_or_terminating() {
    let wrote = Wrote::Deleted { uid: None };
    assert_eq!(seen(&wrote, Some(&work("u1", 4)), NOW), Seen::NotYet);
    assert_eq!(seen(&wrote, None, NOW), Seen::Shown);
    let mut terminating = work("u1", 4);
    terminating.metadata.deletion_timestamp = Some(Time(Default::default()));
    assert_eq!(seen(&wrote, Some(&terminating), NOW), Seen::Shown);
}

/// A chunk's spec holding one ConfigMap per name.
fn spec_of_names(names: &[&str]) -> WorkSpec {
    let mut spec = WorkSpec::default();
    for (i, name) in names.iter().enumerate() {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "demo"}});
        spec.manifest_configs.push(ManifestConfig {
            identifier: identify(i, &manifest),
            source_namespace: Some("demo".into()),
            source_name: (*name).into(),
            ..ManifestConfig::default()
        });
        spec.workload.manifests.push(manifest);
    }
    spec
}

fn cached(uid: &str, generation: i64, names: &[&str]) -> Work {
    let mut w = work(uid, generation);
    w.spec = spec_of_names(names);
    w
}

fn names(chunks: &BTreeMap<usize, Chunk>, index: usize) -> Vec<String> {
    (chunks.get(&index).into_iter())
        .flat_map(|c| c.entries.keys().map(|k| k.1.clone()))
        .collect()
}

const NS: &str = "flotilla-cluster-m1";

fn group() -> Group {
    ("m1".into(), Some("demo".into()))
}

/// A Work cache holding `work`, and its writer.
fn cache_holding(work: Option<Work>) -> (Writer<Work>, Store<Work>) {
    let mut writer = Writer::<Work>::default();
    let store = writer.as_reader();
    if let Some(w) = work {
        writer.apply_watcher_event(&Event::Apply(w));
    }
    (writer, store)
}

/// Chunk 0 of the group as a flush reads it: Work `b-0` from `store`, the stand-ins of
/// `ins` laid over it.
fn read_b0(ins: &StandIns, store: &Store<Work>) -> BTreeMap<usize, Chunk> {
    let (mut out, read) = snapshot_b0(store);
    ins.overlay(&group(), NS, store, &read, &mut out);
    out
}

/// Chunk 0 as read from `store` now, and the Work it was read from.
fn snapshot_b0(store: &Store<Work>) -> (BTreeMap<usize, Chunk>, BTreeMap<String, Arc<Work>>) {
    let (mut out, mut read) = (BTreeMap::new(), BTreeMap::new());
    if let Some(w) = store.get(&ObjectRef::new("b-0").within(NS)) {
        let chunk = Chunk {
            entries: entries_of(&w.spec),
            current_metadata: true,
            ..Chunk::default()
        };
        out.insert(0, chunk);
        read.insert("b-0".to_string(), w);
    }
    (out, read)
}

/// What the stand-ins of `ins` say of chunk 0 as a flush reads it from `store`.
fn overlay_b0(ins: &StandIns, store: &Store<Work>) -> Overlaid {
    let (mut out, read) = snapshot_b0(store);
    ins.overlay(&group(), NS, store, &read, &mut out)
}

/// Stand-ins that wrote `b-0` (uid u1) as generation 2 listing "a" and "b", over a cache
/// still holding generation 1 with "a" alone.
fn written_over_generation_1() -> (StandIns, Writer<Work>, Store<Work>) {
    let (writer, store) = cache_holding(Some(cached("u1", 1, &["a"])));
    let ins = StandIns::default();
    let wrote = applied_spec(spec_of_names(&["a", "b"]), "u1", 2);
    ins.record(NS, "b-0", &group(), 0, wrote);
    (ins, writer, store)
}

/// How many writes stand in (shown ones only mark).
fn standing(ins: &StandIns) -> usize {
    lock(&ins.writes).values().filter(|w| !w.shown).count()
}

#[test]
fn a_lagging_cache_reads_the_own_write_until_its_event_comes() {
    let (ins, mut writer, store) = written_over_generation_1();
    let read = |store: &Store<Work>| read_b0(&ins, store);
    // The cache still holds generation 1: the write stands in.
    assert_eq!(names(&read(&store), 0), ["a", "b"]);
    // An agent's status report on generation 1 changes nothing.
    let status_only = cached("u1", 1, &["a"]);
    writer.apply_watcher_event(&Event::Apply(status_only.clone()));
    ins.observe(&Change::Object(&status_only), &store);
    assert_eq!(names(&read(&store), 0), ["a", "b"]);
    // The write's own event: the cache is the truth again.
    let shown = cached("u1", 2, &["a", "b"]);
    writer.apply_watcher_event(&Event::Apply(shown.clone()));
    ins.observe(&Change::Object(&shown), &store);
    assert_eq!(standing(&ins), 0);
    assert_eq!(names(&read(&store), 0), ["a", "b"]);
}

#[test]
fn a_work_deleted_by_someone_else_after_the_own_write_is_read_as_gone() {
    let (mut writer, store) = cache_holding(None);
    let ins = StandIns::default();
    let wrote = applied_spec(spec_of_names(&["a"]), "u1", 1);
    ins.record(NS, "b-0", &group(), 0, wrote);
    // The create's event and the deletion's come together: the cache never shows it.
    let gone = cached("u1", 1, &["a"]);
    writer.apply_watcher_event(&Event::Apply(gone.clone()));
    writer.apply_watcher_event(&Event::Delete(gone.clone()));
    ins.observe(&Change::Object(&gone), &store);
    let mut out = BTreeMap::new();
    let overlaid = ins.overlay(&group(), NS, &store, &BTreeMap::new(), &mut out);
    assert!(
        out.is_empty() && !overlaid.went_back,
        "the chunk is written again, not assumed there nor waited for"
    );
}

/// Stand-ins that created Work `b-0` (uid u1, generation 1), a cache that showed it, and
/// the Work as created.
fn created_and_shown() -> (StandIns, Writer<Work>, Store<Work>, Work) {
    let (mut writer, store) = cache_holding(None);
    let ins = StandIns::default();
    ins.record(NS, "b-0", &group(), 0, applied("u1", 1));
    let created = cached("u1", 1, &["a"]);
    writer.apply_watcher_event(&Event::Apply(created.clone()));
    ins.observe(&Change::Object(&created), &store);
    (ins, writer, store, created)
}

#[test]
fn a_work_deleted_by_someone_else_after_its_write_showed_is_read_as_gone() {
    let (ins, mut writer, store, created) = created_and_shown();
    writer.apply_watcher_event(&Event::Delete(created.clone()));
    ins.observe(&Change::Object(&created), &store);
    let (mut out, read) = snapshot_b0(&store);
    let overlaid = ins.overlay(&group(), NS, &store, &read, &mut out);
    assert!(out.is_empty() && !overlaid.went_back);
}

#[test]
fn a_cache_missing_a_work_whose_write_it_showed_waits() {
    let (ins, mut writer, store, created) = created_and_shown();
    let overlay = |store: &Store<Work>| overlay_b0(&ins, store);
    assert!(!overlay(&store).went_back);
    // A relist older than the create (another API server's watch cache): no event says
    // the Work was deleted, so its absence is the cache going back.
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitDone);
    assert!(overlay(&store).went_back, "not planned as a missing chunk");
    writer.apply_watcher_event(&Event::Apply(created));
    assert!(!overlay(&store).went_back);
}

#[test]
fn an_own_deletion_hides_the_chunk_the_cache_still_holds() {
    let (mut writer, store) = cache_holding(Some(cached("u1", 3, &["a"])));
    let ins = StandIns::default();
    ins.record(NS, "b-0", &group(), 0, Wrote::Deleted { uid: None });
    let (mut out, read) = snapshot_b0(&store);
    ins.overlay(&group(), NS, &store, &read, &mut out);
    assert!(out.is_empty());
    // Another group's flush keeps it standing in; the deletion's event ends it.
    ins.overlay(
        &("m2".into(), None),
        "flotilla-cluster-m2",
        &store,
        &BTreeMap::new(),
        &mut BTreeMap::new(),
    );
    assert_eq!(lock(&ins.writes).len(), 1);
    let last = cached("u1", 3, &["a"]);
    writer.apply_watcher_event(&Event::Delete(last.clone()));
    ins.observe(&Change::Object(&last), &store);
    assert!(lock(&ins.writes).is_empty());
}

#[test]
fn a_relisted_work_stands_in_until_the_list_ends() {
    let (ins, mut writer, store) = written_over_generation_1();
    let read = |store: &Store<Work>| read_b0(&ins, store);
    // The watch lists again; the list shows the write, but the cache holds generation
    // 1 until the list ends: the write still stands in.
    let listed = cached("u1", 2, &["a", "b"]);
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(listed.clone()));
    ins.observe(&Change::Listed(&listed), &store);
    assert_eq!(names(&read(&store), 0), ["a", "b"]);
    assert_eq!(lock(&ins.writes).len(), 1);
    // The list ends: the cache shows it, and the next read forgets the write.
    writer.apply_watcher_event(&Event::InitDone);
    assert_eq!(names(&read(&store), 0), ["a", "b"]);
    assert_eq!(standing(&ins), 0);
}

#[test]
fn a_cache_holds_a_work_as_before_a_write_it_showed_when_it_went_back() {
    let wrote = applied("u1", 3);
    assert!(went_back(&wrote, &work("u1", 2)));
    assert!(!went_back(&wrote, &work("u1", 3)));
    assert!(!went_back(&wrote, &work("u2", 1)), "another incarnation");
    let unknown = Wrote::Applied {
        spec: WorkSpec::default(),
        stamp: Stamp::default(),
    };
    assert!(!went_back(&unknown, &work("u1", 1)));
    let deleted = Wrote::Deleted {
        uid: Some("u1".into()),
    };
    assert!(
        went_back(&deleted, &work("u1", 9)),
        "the deleted Work itself"
    );
    assert!(!went_back(&deleted, &work("u2", 1)), "created again since");
    assert!(!went_back(&Wrote::Deleted { uid: None }, &work("u1", 1)));
}

#[test]
fn a_chunk_deleted_and_shown_gone_is_read_as_gone_when_the_cache_holds_it_again() {
    let before = cached("u1", 2, &["a", "b"]);
    let (mut writer, store) = cache_holding(Some(before.clone()));
    let ins = StandIns::default();
    ins.record(NS, "b-0", &group(), 0, deleted("u1"));
    writer.apply_watcher_event(&Event::Delete(before.clone()));
    ins.observe(&Change::Object(&before), &store);
    assert_eq!(standing(&ins), 0, "the cache showed the deletion");
    assert!(read_b0(&ins, &store).is_empty());
    // The cache holds the deleted Work again: it is not read from it.
    writer.apply_watcher_event(&Event::Apply(before));
    assert!(read_b0(&ins, &store).is_empty());
    // Written again (a new uid): the new chunk is read.
    ins.record(
        NS,
        "b-0",
        &group(),
        0,
        applied_spec(spec_of_names(&["c"]), "u2", 1),
    );
    writer.apply_watcher_event(&Event::Apply(cached("u2", 1, &["c"])));
    assert_eq!(names(&read_b0(&ins, &store), 0), ["c"]);
}

#[test]
fn a_group_whose_chunk_went_back_before_a_shown_write_waits() {
    let (mut writer, store) = cache_holding(Some(cached("u1", 1, &["a"])));
    let ins = StandIns::default();
    ins.record(
        NS,
        "b-0",
        &group(),
        0,
        applied_spec(spec_of_names(&["a", "b"]), "u1", 2),
    );
    let shown = cached("u1", 2, &["a", "b"]);
    writer.apply_watcher_event(&Event::Apply(shown.clone()));
    ins.observe(&Change::Object(&shown), &store);
    let overlay = |store: &Store<Work>, group: &Group, ns: &str| {
        let mut out = BTreeMap::new();
        let read = match ns == NS {
            true => snapshot_b0(store).1,
            false => BTreeMap::new(),
        };
        ins.overlay(group, ns, store, &read, &mut out)
    };
    assert!(!overlay(&store, &group(), NS).went_back);
    writer.apply_watcher_event(&Event::Apply(cached("u1", 1, &["a"])));
    assert!(overlay(&store, &group(), NS).went_back);
    let other = overlay(&store, &("m2".into(), None), "flotilla-cluster-m2");
    assert!(!other.went_back, "another group reads on");
    // The cache catches up: the group is read again.
    writer.apply_watcher_event(&Event::Apply(shown));
    assert!(!overlay(&store, &group(), NS).went_back);
}

#[test]
fn a_write_the_cache_shows_after_the_chunks_were_read_is_laid_over_them() {
    let (ins, mut writer, store) = written_over_generation_1();
    // The chunks are read; the write's event lands before the stand-ins are laid over
    // them.
    let (mut out, read) = snapshot_b0(&store);
    writer.apply_watcher_event(&Event::Apply(cached("u1", 2, &["a", "b"])));
    ins.overlay(&group(), NS, &store, &read, &mut out);
    assert_eq!(names(&out, 0), ["a", "b"], "not the chunk as it was before");
}

#[test]
fn a_deletion_the_cache_shows_after_the_chunks_were_read_hides_the_chunk() {
    let before = cached("u1", 2, &["a", "b"]);
    // The deletion's event lands between the read and the overlay; observed in between or
    // not (then its mark hides the chunk, else it stands in still), the chunk is gone.
    for observed in [false, true] {
        let (mut writer, store) = cache_holding(Some(before.clone()));
        let ins = StandIns::default();
        ins.record(NS, "b-0", &group(), 0, deleted("u1"));
        let (mut out, read) = snapshot_b0(&store);
        writer.apply_watcher_event(&Event::Delete(before.clone()));
        if observed {
            ins.observe(&Change::Object(&before), &store);
        }
        ins.overlay(&group(), NS, &store, &read, &mut out);
        assert!(out.is_empty(), "the deleted chunk is not written again");
    }
}

fn deleted(uid: &str) -> Wrote {
    Wrote::Deleted {
        uid: Some(uid.into()),
    }
}

#[test]
fn no_group_is_planned_while_the_works_watch_lists() {
    let (mut writer, store) = cache_holding(Some(cached("u1", 1, &["a"])));
    let ins = StandIns::default();
    ins.record(NS, "b-0", &group(), 0, applied("u1", 2));
    let overlay = |store: &Store<Work>| overlay_b0(&ins, store);
    assert!(!overlay(&store).waits(), "the write stands in");
    // The watch lists again, and goes on failing past the backstop: the cache still
    // holds generation 1, which is not planned from.
    ins.observe(&Change::Listing, &store);
    let listing = overlay(&store);
    assert!(listing.listing && listing.waits());
    ins.observe(&Change::Listed(&cached("u1", 2, &["a", "b"])), &store);
    assert!(
        overlay(&store).waits(),
        "a listed Work is not the cache yet"
    );
    // The list ends: the cache is the truth again.
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(cached("u1", 2, &["a", "b"])));
    writer.apply_watcher_event(&Event::InitDone);
    ins.observe(&Change::Synced, &store);
    assert!(!overlay(&store).waits());
    assert_eq!(names(&read_b0(&ins, &store), 0), ["a", "b"]);
}
