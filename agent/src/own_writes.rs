//! The agent's own recent writes, standing in for a member watch cache that has not shown
//! them yet — so a lagging cache is neither taken for drift nor answered with the same
//! apply again. A write stands in until the kind's watch delivers an event of the object
//! carrying the written hash (a member's events come in order, so whatever the cache shows
//! after that is newer than the write: a user's edit or deletion is seen at once), or until
//! a list of the kind ends that was requested after the member answered the write (the
//! list reads the member's storage, so it holds every write committed before it; a write
//! answered while the list was under way may be missing from its snapshot, and stands in
//! until its event, which the watch resumed from the list delivers; a listed object does
//! not end a stand-in on its own, because the cache shows the list only at its end). Time
//! ends a stand-in only as a backstop
//! ([`BACKSTOP`]): a busy member API server can deliver events far later than any fixed
//! interval a decision could trust. A write past the backstop is still kept (until
//! [`FORGET`]) as *unshown*: a cache that still shows the object without its hash then is
//! not trusted for it, and the object is read live before anything is written over it
//! ([`OwnWrites::unshown`]) — a watch stalled on a saturated member (noticed only at the
//! client's read timeout, about five minutes) would otherwise have the agent apply the
//! same manifest again.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::cache::ObjectId;

/// The longest an own write stands in for a cache that never shows it.
pub const BACKSTOP: Duration = Duration::from_secs(300);

/// How long a write the cache never showed is kept as unshown.
pub const FORGET: Duration = Duration::from_secs(1200);

#[derive(Debug)]
struct Own {
    hash: String,
    at: Instant,
    object: Value,
}

/// The writes standing in, by member object.
#[derive(Debug, Default)]
pub struct OwnWrites {
    writes: HashMap<ObjectId, Own>,
    /// When the list under way of each kind (group, plural) was requested.
    listing: HashMap<(String, String), Instant>,
}

impl OwnWrites {
    /// Remembers a write of `hash` (`object`: what the member returned); `None` forgets
    /// the object's write (the write failed).
    pub fn record(&mut self, id: ObjectId, hash: Option<&str>, object: Value) {
        self.writes.retain(|_, w| w.at.elapsed() < FORGET);
        match hash {
            Some(h) => {
                let own = Own {
                    hash: h.to_owned(),
                    at: Instant::now(),
                    object,
                };
                self.writes.insert(id, own);
            }
            None => {
                self.writes.remove(&id);
            }
        }
    }

    /// The write standing in for `id`: its hash and the object the member returned.
    pub fn get(&self, id: &ObjectId) -> Option<(&str, &Value)> {
        (self.writes.get(id))
            .filter(|w| w.at.elapsed() < BACKSTOP)
            .map(|w| (w.hash.as_str(), &w.object))
    }

    /// Whether the agent wrote `hash` to `id` more than [`BACKSTOP`] ago and the cache has
    /// not shown it since (no event carried it, no list ended after it): the cache is not
    /// to be trusted for the object.
    pub fn unshown(&self, id: &ObjectId, hash: &str) -> bool {
        self.unshown_as_of(id, hash, Instant::now())
    }

    fn unshown_as_of(&self, id: &ObjectId, hash: &str, now: Instant) -> bool {
        self.writes.get(id).is_some_and(|w| {
            let age = now.saturating_duration_since(w.at);
            w.hash == hash && (BACKSTOP..FORGET).contains(&age)
        })
    }

    /// A watch event of `id` carrying `hash`: the write of that hash stands in no more.
    pub fn observed(&mut self, id: &ObjectId, hash: Option<&str>) {
        if self
            .writes
            .get(id)
            .is_some_and(|w| Some(w.hash.as_str()) == hash)
        {
            self.writes.remove(id);
        }
    }

    /// The watch of resource `plural` in `group` is about to list it (again).
    pub fn listing(&mut self, group: &str, plural: &str) {
        let kind = (group.to_owned(), plural.to_owned());
        self.listing.insert(kind, Instant::now());
    }

    /// The list of resource `plural` in `group` ended (`listed`: the hash of an object as
    /// the list holds it): the writes answered before it was requested stand in no more
    /// (the list holds them), nor later ones the list happens to show; the others wait for
    /// their event.
    pub fn relisted(
        &mut self,
        group: &str,
        plural: &str,
        listed: impl Fn(&ObjectId) -> Option<String>,
    ) {
        let kind = (group.to_owned(), plural.to_owned());
        let requested = self.listing.remove(&kind);
        self.writes.retain(|id, w| {
            let before = requested.is_some_and(|at| w.at <= at);
            id.0 != group || id.1 != plural || !before && listed(id).as_ref() != Some(&w.hash)
        });
    }

    /// Forgets `id`'s write (the object was pruned or released).
    pub fn forget(&mut self, id: &ObjectId) {
        self.writes.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id(name: &str) -> ObjectId {
        (
            String::new(),
            "configmaps".into(),
            "demo".into(),
            name.into(),
        )
    }

    #[test]
    fn a_write_stands_in_until_an_event_shows_its_hash() {
        let mut own = OwnWrites::default();
        own.record(id("a"), Some("h2"), json!({"v": 2}));
        // The event of an older version (the cache lagging) keeps it.
        own.observed(&id("a"), Some("h1"));
        assert_eq!(own.get(&id("a")), Some(("h2", &json!({"v": 2}))));
        own.observed(&id("b"), Some("h2"));
        assert!(own.get(&id("a")).is_some(), "another object's event");
        // The write's own event: the cache is the truth again.
        own.observed(&id("a"), Some("h2"));
        assert_eq!(own.get(&id("a")), None);
    }

    #[test]
    fn a_newer_write_replaces_the_older_and_waits_for_its_own_event() {
        let mut own = OwnWrites::default();
        own.record(id("a"), Some("h1"), json!({"v": 1}));
        own.record(id("a"), Some("h2"), json!({"v": 2}));
        own.observed(&id("a"), Some("h1"));
        assert_eq!(own.get(&id("a")).map(|w| w.0), Some("h2"));
        own.record(id("a"), None, Value::Null);
        assert_eq!(
            own.get(&id("a")),
            None,
            "a failed write stands in for nothing"
        );
    }

    #[test]
    fn a_write_the_cache_never_showed_is_unshown_after_the_backstop() {
        let mut own = OwnWrites::default();
        own.record(id("a"), Some("h2"), Value::Null);
        let now = Instant::now();
        assert!(!own.unshown_as_of(&id("a"), "h2", now), "still standing in");
        let later = now + BACKSTOP;
        assert!(own.unshown_as_of(&id("a"), "h2", later));
        assert!(
            !own.unshown_as_of(&id("a"), "h3", later),
            "another manifest"
        );
        assert!(!own.unshown_as_of(&id("b"), "h2", later), "another object");
        assert!(
            !own.unshown_as_of(&id("a"), "h2", now + FORGET),
            "forgotten"
        );
        // Its event comes at last: nothing is unshown any more.
        own.observed(&id("a"), Some("h2"));
        assert!(!own.unshown_as_of(&id("a"), "h2", later));
    }

    #[test]
    fn a_relist_of_the_kind_ends_its_writes_only() {
        let mut own = OwnWrites::default();
        own.record(id("a"), Some("h1"), Value::Null);
        let secret = (String::new(), "secrets".into(), "demo".into(), "s".into());
        own.record(secret.clone(), Some("h1"), Value::Null);
        own.listing("", "configmaps");
        own.listing("", "secrets");
        own.relisted("", "configmaps", |_| None);
        assert_eq!(own.get(&id("a")), None);
        assert!(own.get(&secret).is_some());
        own.forget(&secret);
        assert_eq!(own.get(&secret), None);
    }

    #[test]
    fn a_write_answered_during_a_list_outlives_the_list() {
        let mut own = OwnWrites::default();
        own.record(id("before"), Some("h1"), Value::Null);
        own.listing("", "configmaps");
        // Answered after the list was requested: its snapshot may precede it.
        std::thread::sleep(Duration::from_millis(2));
        own.record(id("during"), Some("h1"), Value::Null);
        own.relisted("", "configmaps", |_| None);
        assert_eq!(own.get(&id("before")), None, "the list holds it");
        assert!(own.get(&id("during")).is_some(), "its event ends it");
        own.observed(&id("during"), Some("h1"));
        assert_eq!(own.get(&id("during")), None);
    }

    #[test]
    fn a_write_the_list_shows_ends_with_it() {
        let mut own = OwnWrites::default();
        own.listing("", "configmaps");
        std::thread::sleep(Duration::from_millis(2));
        own.record(id("shown"), Some("h2"), Value::Null);
        own.record(id("older"), Some("h2"), Value::Null);
        own.relisted("", "configmaps", |id| match id.3.as_str() {
            "shown" => Some("h2".into()),
            _ => Some("h1".into()),
        });
        assert_eq!(own.get(&id("shown")), None, "the list holds the write");
        assert!(
            own.get(&id("older")).is_some(),
            "the list's snapshot precedes it"
        );
    }

    #[test]
    fn a_list_whose_start_went_unseen_ends_only_what_it_shows() {
        let mut own = OwnWrites::default();
        own.record(id("a"), Some("h1"), Value::Null);
        own.relisted("", "configmaps", |_| None);
        assert!(own.get(&id("a")).is_some());
        // Each list ends only what was answered before its own request.
        own.listing("", "configmaps");
        own.relisted("", "configmaps", |_| None);
        own.relisted("", "configmaps", |_| None);
        assert_eq!(own.get(&id("a")), None);
    }
}
