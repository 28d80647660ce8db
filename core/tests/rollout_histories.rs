//! The rollout planner when the template goes back to an earlier revision mid-rollout:
//! table tests of A → B → A, and the planner driven through seeded histories of template
//! changes between two revisions with slow members, lagging member caches, lost member and
//! status writes and stale status reads. Once the template stops changing and the faults
//! stop, every history must end with every cluster on the template and the rollout
//! complete (the soak's rollout invariant, on the pure planner).

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::rollout::{ClusterRolloutState as S, RolloutReason, RolloutSpec, RolloutStatus};
use flotilla_core::rollout::plan::{ClusterInput, Input, Plan, plan};
use serde_json::json;

const T0: i64 = 1_800_000_000;
const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];

/// The soak's rollout: one cluster at a time by name, 1 s healthy, 600 s deadline.
fn soak_spec(paused: bool) -> RolloutSpec {
    serde_json::from_value(json!({"strategy": "Progressive", "maxConcurrency": 1,
        "minSuccessSeconds": 1, "progressDeadlineSeconds": 600, "maxFailures": 0,
        "paused": paused}))
    .expect("valid spec.rollout")
}

/// One step: `held[i]` is the revision member i holds (healthy there).
fn step(
    spec: &RolloutSpec,
    target: &str,
    held: [&str; 3],
    previous: Option<&RolloutStatus>,
    now: i64,
) -> Plan {
    let labels = BTreeMap::new();
    let clusters: Vec<ClusterInput<'_>> = CLUSTERS
        .iter()
        .zip(held)
        .map(|(name, revision)| ClusterInput {
            name,
            labels: &labels,
            at_target: revision == target,
            healthy: revision == target,
            problem: None,
            failed: false,
        })
        .collect();
    plan(&Input {
        spec,
        target,
        generation: 1,
        previous,
        clusters: &clusters,
        now,
    })
}

fn states(p: &Plan) -> Vec<S> {
    p.status.clusters.iter().map(|c| c.state).collect()
}

fn updated(p: &Plan) -> Vec<&str> {
    p.updated.iter().map(String::as_str).collect()
}

#[test]
fn back_at_the_earlier_revision_the_clusters_still_on_it_are_done_and_the_moved_one_goes_back() {
    let spec = soak_spec(false);
    let a = step(&spec, "A", ["A"; 3], None, T0);
    let a = step(&spec, "A", ["A"; 3], Some(&a.status), T0 + 2);
    assert_eq!(a.reason, RolloutReason::Complete);
    // B reaches member1 only.
    let b = step(&spec, "B", ["A"; 3], Some(&a.status), T0 + 10);
    assert_eq!(updated(&b), ["member1"]);
    assert_eq!(b.status.stable_revision.as_deref(), Some("A"));
    let b = step(&spec, "B", ["B", "A", "A"], Some(&b.status), T0 + 11);
    // Back to A: member2 and member3 hold it already (done once healthy for 1 s); member1
    // keeps B until its turn, then goes back.
    let back = step(&spec, "A", ["B", "A", "A"], Some(&b.status), T0 + 12);
    assert_eq!(back.status.target_revision, "A");
    assert_eq!(states(&back), [S::Pending, S::Progressing, S::Progressing]);
    assert_eq!(updated(&back), ["member2", "member3"]);
    let back = step(&spec, "A", ["B", "A", "A"], Some(&back.status), T0 + 14);
    assert_eq!(states(&back), [S::Progressing, S::Succeeded, S::Succeeded]);
    assert_eq!(updated(&back), ["member1", "member2", "member3"]);
    let back = step(&spec, "A", ["A"; 3], Some(&back.status), T0 + 15);
    let back = step(&spec, "A", ["A"; 3], Some(&back.status), T0 + 17);
    assert_eq!(back.reason, RolloutReason::Complete, "{}", back.message);
    assert_eq!(back.status.progress, "3/3");
}

#[test]
fn back_at_the_earlier_revision_while_paused_only_the_moved_cluster_waits() {
    let spec = soak_spec(false);
    let a = step(&spec, "A", ["A"; 3], None, T0);
    let b = step(&spec, "B", ["A"; 3], Some(&a.status), T0 + 10);
    let b = step(&spec, "B", ["B", "A", "A"], Some(&b.status), T0 + 11);
    let paused = soak_spec(true);
    let back = step(&paused, "A", ["B", "A", "A"], Some(&b.status), T0 + 12);
    let back = step(&paused, "A", ["B", "A", "A"], Some(&back.status), T0 + 14);
    assert_eq!(states(&back), [S::Pending, S::Succeeded, S::Succeeded]);
    assert_eq!(back.reason, RolloutReason::Paused);
    assert_eq!(updated(&back), ["member2", "member3"], "member1 keeps B");
    let resumed = step(&spec, "A", ["B", "A", "A"], Some(&back.status), T0 + 20);
    assert_eq!(updated(&resumed), ["member1", "member2", "member3"]);
}

/// xorshift64: the histories' choices, reproducible per seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One member: the revision it holds, when it gets healthy there, and what the
/// controller's cache shows (revision, healthy).
#[derive(Clone, Copy, Default)]
struct Member {
    revision: Option<&'static str>,
    ready_at: i64,
    cached: (Option<&'static str>, bool),
}

/// The planner and the world it acts on, as the sync controller carries a plan out: the
/// started clusters get the target, a held cluster keeps its revision, a cluster without
/// the object gets the revision the rollout has reached.
struct World {
    spec: RolloutSpec,
    template: &'static str,
    members: [Member; 3],
    stored: Option<RolloutStatus>,
    written: Vec<RolloutStatus>,
    now: i64,
}

impl World {
    fn new() -> World {
        World {
            spec: soak_spec(false),
            template: "A",
            members: [Member::default(); 3],
            stored: None,
            written: Vec::new(),
            now: T0,
        }
    }

    /// One reconcile; with `faulty`, reads may be stale and writes may be lost.
    fn reconcile(&mut self, rng: &mut Rng, faulty: bool) -> RolloutReason {
        let mut fault = |n: u64| faulty && rng.below(n) == 0;
        let labels = BTreeMap::new();
        let clusters: Vec<ClusterInput<'_>> = CLUSTERS
            .iter()
            .zip(&self.members)
            .map(|(name, m)| ClusterInput {
                name,
                labels: &labels,
                at_target: m.cached.0 == Some(self.template),
                healthy: m.cached.0 == Some(self.template) && m.cached.1,
                problem: None,
                failed: false,
            })
            .collect();
        // A stale read: one of our earlier status writes.
        let previous = match self.written.len() {
            n if n > 0 && fault(4) => Some(self.written[(self.now as usize) % n].clone()),
            _ => self.stored.clone(),
        };
        let p = plan(&Input {
            spec: &self.spec,
            target: self.template,
            generation: 1,
            previous: previous.as_ref(),
            clusters: &clusters,
            now: self.now,
        });
        let reached = states(&p).contains(&S::Succeeded);
        let fallback = match (&p.status.stable_revision, reached) {
            (Some(s), false) if s == "A" => "A",
            (Some(s), false) if s == "B" => "B",
            _ => self.template,
        };
        let started: BTreeSet<&str> = updated(&p).into_iter().collect();
        for (name, m) in CLUSTERS.iter().zip(self.members.iter_mut()) {
            let want = match (started.contains(name), m.cached.0) {
                (true, _) => self.template,
                (false, Some(held)) => held,
                (false, None) => fallback,
            };
            // Written when the cache shows another revision, unless the write is lost.
            if m.cached.0 != Some(want) && m.revision != Some(want) && !fault(5) {
                m.revision = Some(want);
                m.ready_at = self.now + (self.now % 7);
            }
        }
        for m in &mut self.members {
            if !fault(2) {
                m.cached = (m.revision, self.now >= m.ready_at);
            }
        }
        if !fault(4) {
            self.written.push(p.status.clone());
            self.stored = Some(p.status);
        }
        p.reason
    }
}

#[test]
fn after_any_history_of_reverted_templates_and_faults_the_rollout_completes() {
    for seed in 0..2000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut w = World::new();
        let mut templates = Vec::new();
        for _ in 0..60 {
            if rng.below(6) == 0 {
                w.template = if w.template == "A" { "B" } else { "A" };
                templates.push((w.now - T0, w.template));
            }
            w.now += rng.below(4) as i64;
            w.reconcile(&mut rng, true);
        }
        let mut reason = RolloutReason::Progressing;
        for _ in 0..60 {
            w.now += 1;
            reason = w.reconcile(&mut rng, false);
        }
        let held: Vec<_> = w.members.iter().map(|m| m.revision).collect();
        assert!(
            reason == RolloutReason::Complete && held.iter().all(|r| *r == Some(w.template)),
            "seed {seed}: {reason:?} on {}, members {held:?}, templates {templates:?}, status {:#?}",
            w.template,
            w.stored
        );
    }
}

/// `soak_spec` rolling back on failure, with a 30 s deadline.
fn rollback_spec() -> RolloutSpec {
    let mut spec = soak_spec(false);
    spec.on_failure = flotilla_api::rollout::OnFailure::Rollback;
    spec.progress_deadline_seconds = Some(30);
    spec
}

/// One step where the members holding the target are unhealthy on it (`B` never gets
/// ready); every other member is healthy.
fn step_broken(
    spec: &RolloutSpec,
    target: &str,
    held: [&str; 3],
    previous: Option<&RolloutStatus>,
    now: i64,
) -> Plan {
    let labels = BTreeMap::new();
    let clusters: Vec<ClusterInput<'_>> = CLUSTERS
        .iter()
        .zip(held)
        .map(|(name, revision)| ClusterInput {
            name,
            labels: &labels,
            at_target: revision == target,
            healthy: revision == target && revision != "B",
            problem: (revision == "B").then(|| "0/1 pods ready".to_string()),
            failed: false,
        })
        .collect();
    plan(&Input {
        spec,
        target,
        generation: 1,
        previous,
        clusters: &clusters,
        now,
    })
}

#[test]
fn a_broken_revision_goes_back_on_the_failed_cluster_and_the_next_one_rolls_out_everywhere() {
    let spec = rollback_spec();
    let a = step_broken(&spec, "A", ["A"; 3], None, T0);
    let a = step_broken(&spec, "A", ["A"; 3], Some(&a.status), T0 + 2);
    assert_eq!(a.reason, RolloutReason::Complete);
    // B reaches member1, which never gets ready: at the deadline it goes back to A.
    let b = step_broken(&spec, "B", ["A"; 3], Some(&a.status), T0 + 10);
    assert_eq!(updated(&b), ["member1"]);
    let b = step_broken(&spec, "B", ["B", "A", "A"], Some(&b.status), T0 + 20);
    let b = step_broken(&spec, "B", ["B", "A", "A"], Some(&b.status), T0 + 40);
    assert_eq!(b.reason, RolloutReason::RolledBack, "{}", b.message);
    let back = b.rollback.clone().expect("a rollback");
    assert_eq!((back.to.as_str(), back.clusters.len()), ("A", 1));
    assert!(updated(&b).is_empty());
    // Carried out (member1 on A again): nothing else moves, the reason stays.
    let held = step_broken(&spec, "B", ["A"; 3], Some(&b.status), T0 + 41);
    assert_eq!(states(&held), [S::Failed, S::Pending, S::Pending]);
    assert!(held.message.contains("0/1 pods ready"), "{}", held.message);
    assert_eq!(held.rollback, b.rollback);
    // A new revision C rolls out from the first cluster, with A still the stable one.
    let mut c = step_broken(&spec, "C", ["A"; 3], Some(&held.status), T0 + 50);
    assert_eq!(c.status.stable_revision.as_deref(), Some("A"));
    let mut members = ["A"; 3];
    for now in T0 + 51..T0 + 70 {
        for name in &c.updated {
            let i = CLUSTERS.iter().position(|n| n == name).expect("a cluster");
            members[i] = "C";
        }
        c = step_broken(&spec, "C", members, Some(&c.status), now);
    }
    assert_eq!(c.reason, RolloutReason::Complete, "{}", c.message);
    assert_eq!(members, ["C"; 3]);
}
