//! The split rule of pull mode's bundle Works: which chunk of its group (one federated
//! type, one namespace, one Pull cluster) each member object's manifest goes to, so that
//! no Work exceeds a bounded size and a change to one object rewrites one Work. Pure.
//!
//! The rule, in order:
//! 1. an object that a chunk holds stays there while the chunk, filled in key order with
//!    the objects it keeps, stays within the *keep* limit (the bundler gives the largest
//!    bound it accepts, so that lowering the bound — an upgrade — moves nothing);
//! 2. every other object (new, or no longer fitting), in key order, goes to the
//!    lowest-numbered chunk whose total stays within the limit with it, else to the lowest
//!    chunk number not in use;
//! 3. an object larger than the limit by itself gets a chunk of its own (the API server
//!    then judges it; the agent reports its failure on that object alone).
//!
//! Assignments are read back from the Works themselves, so a restart of the control plane
//! computes the same chunks and writes nothing.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hash,
    time::{Duration, Instant},
};

/// One object of a group: its size in bytes and the chunk that holds it now, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item<K> {
    /// The object's key (its federated object).
    pub key: K,
    /// Its manifest's size (bytes of JSON, config included).
    pub size: usize,
    /// The chunk that holds it now.
    pub current: Option<usize>,
}

/// The chunk of every item under the rule above, for chunks of at most `limit` bytes.
pub fn assign<K: Ord + Clone>(items: &[Item<K>], limit: usize) -> BTreeMap<K, usize> {
    assign_keeping(items, limit, limit)
}

/// [`assign`], where an item stays in its chunk while that chunk is within `keep` bytes
/// (at least `limit`); new and moving items are placed within `limit`.
pub fn assign_keeping<K: Ord + Clone>(
    items: &[Item<K>],
    limit: usize,
    keep: usize,
) -> BTreeMap<K, usize> {
    let keep = keep.max(limit);
    let mut sorted: Vec<&Item<K>> = items.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut totals: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let mut homeless = Vec::new();
    for item in &sorted {
        match item.current {
            Some(c) if fits(totals.get(&c).copied(), item.size, keep) => {
                *totals.entry(c).or_default() += item.size;
                out.insert(item.key.clone(), c);
            }
            _ => homeless.push(*item),
        }
    }
    for item in homeless {
        let chunk = totals
            .iter()
            .find(|(_, total)| fits(Some(**total), item.size, limit))
            .map(|(c, _)| *c)
            .unwrap_or_else(|| lowest_free(totals.keys().copied().collect()));
        *totals.entry(chunk).or_default() += item.size;
        out.insert(item.key.clone(), chunk);
    }
    out
}

/// Whether an item of `size` fits a chunk now holding `total` (an empty chunk takes any).
fn fits(total: Option<usize>, size: usize, limit: usize) -> bool {
    match total {
        None | Some(0) => true,
        Some(t) => t.saturating_add(size) <= limit,
    }
}

fn lowest_free(used: BTreeSet<usize>) -> usize {
    (0..).find(|c| !used.contains(c)).unwrap_or(0)
}

/// Which of the `pending` groups are due at `now`: each is written at most once per
/// `interval` from the end of its last write (`written`), so a stream of changes to one
/// group costs a write per interval. Returns them and how soon the first of the others is.
pub fn due<'g, G: Clone + Eq + Hash + 'g>(
    pending: impl Iterator<Item = &'g G>,
    written: &HashMap<G, Instant>,
    now: Instant,
    interval: Duration,
) -> (Vec<G>, Option<Duration>) {
    let mut due = Vec::new();
    let mut later: Option<Duration> = None;
    for group in pending {
        let wait = (written.get(group))
            .map(|at| (*at + interval).saturating_duration_since(now))
            .unwrap_or_default();
        if wait.is_zero() {
            due.push(group.clone());
        } else {
            later = Some(later.map_or(wait, |l| l.min(wait)));
        }
    }
    (due, later)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str, size: usize, current: Option<usize>) -> Item<String> {
        Item {
            key: key.into(),
            size,
            current,
        }
    }

    fn chunks(a: &BTreeMap<String, usize>) -> Vec<(&str, usize)> {
        a.iter().map(|(k, c)| (k.as_str(), *c)).collect()
    }

    #[test]
    fn a_lower_bound_moves_nothing_already_placed_and_places_new_objects_within_it() {
        // Chunk 0 was filled to 12 bytes under an older, larger bound.
        let items = [
            item("a", 4, Some(0)),
            item("b", 4, Some(0)),
            item("c", 4, Some(0)),
            item("d", 4, None),
        ];
        let a = assign_keeping(&items, 8, 512);
        assert_eq!(chunks(&a), [("a", 0), ("b", 0), ("c", 0), ("d", 1)]);
        assert_eq!(
            chunks(&assign(&items, 8)),
            [("a", 0), ("b", 0), ("c", 1), ("d", 1)],
            "without the keep limit, c would move"
        );
    }

    #[test]
    fn new_objects_fill_chunks_in_key_order_up_to_the_limit() {
        let items = [item("c", 4, None), item("a", 4, None), item("b", 4, None)];
        assert_eq!(
            chunks(&assign(&items, 8)),
            [("a", 0), ("b", 0), ("c", 1)],
            "a and b fill chunk 0 (8 bytes), c opens chunk 1"
        );
        assert_eq!(chunks(&assign(&items, 100)), [("a", 0), ("b", 0), ("c", 0)]);
    }

    #[test]
    fn an_object_stays_in_its_chunk_so_one_change_rewrites_one_chunk() {
        // A new object sorting first does not push the others along.
        let items = [
            item("b", 4, Some(0)),
            item("c", 4, Some(1)),
            item("a", 4, None),
        ];
        let a = assign(&items, 8);
        assert_eq!(chunks(&a), [("a", 0), ("b", 0), ("c", 1)]);
        // One that grows past its chunk's room moves to the first chunk with room; its
        // neighbour stays.
        let items = [
            item("a", 4, Some(0)),
            item("b", 6, Some(0)),
            item("c", 2, Some(1)),
        ];
        assert_eq!(chunks(&assign(&items, 8)), [("a", 0), ("b", 1), ("c", 1)]);
    }

    #[test]
    fn holes_are_filled_before_a_new_chunk_is_opened() {
        let items = [
            item("a", 4, Some(2)),
            item("z", 4, None),
            item("y", 9, None),
        ];
        let a = assign(&items, 8);
        // z fits beside a in chunk 2; y is larger than the limit and gets chunk 0 alone.
        assert_eq!(chunks(&a), [("a", 2), ("y", 0), ("z", 2)]);
    }

    #[test]
    fn an_oversized_object_gets_a_chunk_of_its_own() {
        let items = [item("big", 20, None), item("small", 1, None)];
        assert_eq!(chunks(&assign(&items, 8)), [("big", 0), ("small", 1)]);
        // Already alone in a chunk, it stays there.
        let items = [item("big", 20, Some(3)), item("small", 1, Some(0))];
        assert_eq!(chunks(&assign(&items, 8)), [("big", 3), ("small", 0)]);
    }

    #[test]
    fn the_assignment_read_back_is_stable() {
        let items: Vec<_> = (0..50)
            .map(|i| item(&format!("k{i:02}"), 3 + i % 5, None))
            .collect();
        let first = assign(&items, 40);
        let again: Vec<_> = items
            .iter()
            .map(|i| Item {
                current: first.get(&i.key).copied(),
                ..i.clone()
            })
            .collect();
        assert_eq!(assign(&again, 40), first);
        let mut totals: BTreeMap<usize, usize> = BTreeMap::new();
        for i in &items {
            *totals.entry(first[&i.key]).or_default() += i.size;
        }
        assert!(totals.values().all(|t| *t <= 40), "{totals:?}");
    }

    #[test]
    fn a_group_is_written_at_once_then_at_most_once_per_interval() {
        let now = Instant::now();
        let interval = Duration::from_millis(200);
        let ms = Duration::from_millis;
        let written = HashMap::from([
            ("a", now - ms(50)),
            ("b", now - ms(250)),
            ("c", now - ms(120)),
        ]);
        let pending = ["a", "b", "c", "d"];
        let (due_now, later) = due(pending.iter(), &written, now, interval);
        assert_eq!(due_now, vec!["b", "d"], "not written lately, or never");
        assert_eq!(later, Some(ms(80)), "c is due first of the others");
        let (none, later) = due(["a"].iter(), &written, now, interval);
        assert!(none.is_empty());
        assert_eq!(later, Some(ms(150)));
        assert_eq!(
            due(std::iter::empty(), &written, now, interval),
            (vec![], None)
        );
    }
}
