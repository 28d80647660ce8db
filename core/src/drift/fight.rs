//! When repairing is a fight: the same field rewritten by the same other writer
//! [`FIGHT_REWRITES`] times within [`FIGHT_WINDOW_SECONDS`] (an HPA scaling a Deployment
//! whose replicas the template sets, a mutating webhook rewriting a field). Writing again
//! would only start the next round, so the last rewrite is left in place and reported.

use std::collections::VecDeque;

use super::is_within;

/// Rewrites of one field by one writer that make a fight (the last one is not repaired).
pub const FIGHT_REWRITES: usize = 5;
/// The window the rewrites are counted in.
pub const FIGHT_WINDOW_SECONDS: i64 = 300;
/// Repairs remembered per member object (older ones fall out first).
const KEPT: usize = 2 * FIGHT_REWRITES;

/// One repair: when (Unix seconds), of which fields (JSON pointers), undoing whose write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// Unix seconds.
    pub at: i64,
    /// The writer whose change was undone.
    pub manager: String,
    /// The fields repaired.
    pub pointers: Vec<String>,
}

/// The repairs of one member object within the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    repairs: VecDeque<Repair>,
}

impl History {
    /// Whether one more rewrite by `manager` of `pointers` at `now` is a fight: with it,
    /// the writer rewrote a field at least [`FIGHT_REWRITES`] times within the window.
    pub fn is_fight(&self, now: i64, manager: &str, pointers: &[&str]) -> bool {
        let earlier = self
            .repairs
            .iter()
            .filter(|r| now - r.at < FIGHT_WINDOW_SECONDS && r.manager == manager)
            .filter(|r| overlaps(&r.pointers, pointers))
            .count();
        earlier + 1 >= FIGHT_REWRITES
    }

    /// Remembers a repair, forgetting those out of the window.
    pub fn record(&mut self, repair: Repair) {
        let now = repair.at;
        self.repairs.retain(|r| now - r.at < FIGHT_WINDOW_SECONDS);
        if self.repairs.len() >= KEPT {
            self.repairs.pop_front();
        }
        self.repairs.push_back(repair);
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.repairs.is_empty()
    }

    /// Whether the newest repair is older than the window (the entry can be dropped).
    pub fn expired(&self, now: i64) -> bool {
        self.repairs
            .back()
            .is_none_or(|r| now - r.at >= FIGHT_WINDOW_SECONDS)
    }
}

fn overlaps(a: &[String], b: &[&str]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| is_within(x, y) || is_within(y, x)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repair(at: i64, manager: &str, pointer: &str) -> Repair {
        Repair {
            at,
            manager: manager.into(),
            pointers: vec![pointer.into()],
        }
    }

    #[test]
    fn the_fifth_rewrite_of_a_field_by_one_writer_within_the_window_is_a_fight() {
        let mut h = History::default();
        for at in 0..(FIGHT_REWRITES as i64 - 1) {
            assert!(!h.is_fight(at, "hpa", &["/spec/replicas"]), "rewrite {at}");
            h.record(repair(at, "hpa", "/spec/replicas"));
        }
        assert!(h.is_fight(10, "hpa", &["/spec/replicas"]));
        // Another writer, or another field, is not the same fight.
        assert!(!h.is_fight(10, "kubectl-edit", &["/spec/replicas"]));
        assert!(!h.is_fight(10, "hpa", &["/spec/paused"]));
    }

    #[test]
    fn rewrites_spread_wider_than_the_window_are_no_fight() {
        let mut h = History::default();
        for i in 0..10 {
            let at = i * FIGHT_WINDOW_SECONDS / 2;
            assert!(!h.is_fight(at, "hpa", &["/spec/replicas"]), "rewrite {i}");
            h.record(repair(at, "hpa", "/spec/replicas"));
        }
        assert!(!h.expired(9 * FIGHT_WINDOW_SECONDS / 2));
        assert!(h.expired(20 * FIGHT_WINDOW_SECONDS));
    }

    #[test]
    fn a_field_below_a_repaired_one_counts_as_the_same_field() {
        let mut h = History::default();
        for at in 0..4 {
            h.record(repair(at, "w", "/spec/template"));
        }
        assert!(h.is_fight(5, "w", &["/spec/template/spec/containers/0/image"]));
        assert!(!History::default().is_fight(0, "w", &["/a"]));
    }
}
