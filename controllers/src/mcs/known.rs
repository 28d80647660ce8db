//! What the controller knows of each member, without I/O: its [`Availability`] and
//! whether a pass still waits for it.
//!
//! After a start (or when a member joins), nothing is written until the member is judged,
//! so that a plan over part of the ClusterSet never rewrites what a full view wrote. Each
//! member is waited for on its own and for a bounded time: for the registry's first health
//! verdict (a probe has a timeout), then, once Ready, for its caches — at most the
//! library's per-cluster sync timeout ([`SyncState`]). A member whose caches miss it is
//! held (nothing of it added or removed), reported, and no longer waited for; the others
//! go on. Once judged, a member is never waited for again: later it is held while unknown.

use std::collections::BTreeSet;

use flotilla_multicluster::SyncState;

use super::plan::Availability;

/// What is known of one member when a pass starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberFacts {
    /// The health check says Ready.
    pub ready: bool,
    /// Where its caches stand (a Pull member's: the host's caches of its reports).
    pub caches: SyncState,
    /// Seen Ready by this controller before.
    pub seen_ready: bool,
    /// The registry has reached a health verdict on it (Ready, or reported why not).
    pub verdict: bool,
}

/// A member's availability, and whether a pass waits for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// What the planner takes.
    pub availability: Availability,
    /// Not known yet, within its bound: a pass waits (if it was never judged before).
    pub wait: bool,
}

/// Judges one member: available when Ready with every cache synced; held and not waited
/// for when its caches missed their sync timeout; down when not Ready and either seen
/// Ready before or judged so by the registry; otherwise unknown, and waited for.
pub fn judge(facts: &MemberFacts) -> Judgement {
    let (availability, wait) = match (facts.ready, &facts.caches) {
        (true, SyncState::Synced) => (Availability::Available, false),
        (true, SyncState::Syncing) => (Availability::Unknown, true),
        (true, SyncState::TimedOut { .. }) => (Availability::Unknown, false),
        (false, _) if facts.seen_ready || facts.verdict => (Availability::Down, false),
        (false, _) => (Availability::Unknown, true),
    };
    Judgement { availability, wait }
}

/// Which members this controller has seen Ready and which it has judged, so that each is
/// waited for only until its first judgement.
#[derive(Debug, Default)]
pub struct Memory {
    seen_ready: BTreeSet<String>,
    judged: BTreeSet<String>,
}

impl Memory {
    /// Judges member `name` ([`judge`], with what this controller saw of it before); its
    /// `wait` is true only while it has never been judged.
    pub fn judge(
        &mut self,
        name: &str,
        ready: bool,
        caches: SyncState,
        verdict: bool,
    ) -> Judgement {
        if ready {
            self.seen_ready.insert(name.to_owned());
        }
        let facts = MemberFacts {
            ready,
            caches,
            seen_ready: self.seen_ready.contains(name),
            verdict,
        };
        let mut judgement = judge(&facts);
        if !judgement.wait {
            self.judged.insert(name.to_owned());
        }
        judgement.wait &= !self.judged.contains(name);
        judgement
    }
}

/// Where a member's caches stand, from each of its caches' states (`None`: a cache not
/// started yet, which is as good as syncing): timed out when any cache is (with the first
/// such cache's name and reason), synced when every one is, syncing otherwise.
pub fn combine<'a>(caches: impl IntoIterator<Item = (&'a str, Option<SyncState>)>) -> SyncState {
    let mut all_synced = true;
    for (name, state) in caches {
        match state {
            Some(SyncState::TimedOut { reason }) => {
                return SyncState::TimedOut {
                    reason: format!("{name}: {reason}"),
                };
            }
            Some(SyncState::Synced) => {}
            Some(SyncState::Syncing) | None => all_synced = false,
        }
    }
    if all_synced {
        SyncState::Synced
    } else {
        SyncState::Syncing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> SyncState {
        SyncState::TimedOut {
            reason: "no answer".into(),
        }
    }

    #[test]
    fn each_member_is_judged_on_its_own_and_waited_for_only_while_unknown_within_its_bound() {
        use Availability::*;
        let facts = |ready, caches: SyncState, seen_ready, verdict| MemberFacts {
            ready,
            caches,
            seen_ready,
            verdict,
        };
        let table = [
            (
                facts(true, SyncState::Synced, false, true),
                Available,
                false,
            ),
            (facts(true, SyncState::Syncing, true, true), Unknown, true),
            // Missed the library's sync timeout: held, reported, not waited for.
            (facts(true, timed_out(), true, true), Unknown, false),
            (facts(false, SyncState::Syncing, true, false), Down, false),
            // The registry's verdict (say a black-holed member: Offline) makes it down.
            (facts(false, SyncState::Syncing, false, true), Down, false),
            // Not probed yet since the start: waited for.
            (
                facts(false, SyncState::Syncing, false, false),
                Unknown,
                true,
            ),
        ];
        for (f, availability, wait) in table {
            assert_eq!(judge(&f), Judgement { availability, wait }, "{f:?}");
        }
    }

    #[test]
    fn a_member_is_waited_for_only_until_its_first_judgement() {
        let mut memory = Memory::default();
        // Not probed yet: waited for; then Ready with caches filling: still waited for.
        assert!(memory.judge("m", false, SyncState::Syncing, false).wait);
        assert!(memory.judge("m", true, SyncState::Syncing, true).wait);
        let j = memory.judge("m", true, SyncState::Synced, true);
        assert_eq!((j.availability, j.wait), (Availability::Available, false));
        // Down, then back with its caches filling again: held, not waited for.
        let j = memory.judge("m", false, SyncState::Syncing, true);
        assert_eq!((j.availability, j.wait), (Availability::Down, false));
        let j = memory.judge("m", true, SyncState::Syncing, true);
        assert_eq!((j.availability, j.wait), (Availability::Unknown, false));
        // Another member is waited for on its own.
        assert!(memory.judge("n", true, SyncState::Syncing, true).wait);
    }

    #[test]
    fn a_member_s_caches_are_synced_only_when_all_are_and_timed_out_when_any_is() {
        assert_eq!(
            combine([
                ("exports", Some(SyncState::Synced)),
                ("services", Some(SyncState::Synced))
            ]),
            SyncState::Synced
        );
        assert_eq!(
            combine([("exports", Some(SyncState::Synced)), ("slices", None)]),
            SyncState::Syncing
        );
        assert_eq!(
            combine([
                ("exports", Some(SyncState::Syncing)),
                ("services", Some(timed_out())),
            ]),
            SyncState::TimedOut {
                reason: "services: no answer".into()
            }
        );
        assert_eq!(combine([]), SyncState::Synced);
    }
}
