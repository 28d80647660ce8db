//! Rendezvous (highest-random-weight) hashing: which live peer a cluster belongs to. Every
//! replica computes the same answer from the same peers; when a peer leaves, only its own
//! clusters move (each to the peer with the next highest weight), and when one joins, it
//! takes only the clusters it now wins.

use std::hash::{Hash, Hasher};

/// The weight of `peer` for `cluster`: a 64-bit FNV-1a hash of both (stable across
/// processes and builds, unlike the standard library's randomly seeded hasher).
pub fn weight(peer: &str, cluster: &str) -> u64 {
    let mut hasher = Fnv(0xcbf2_9ce4_8422_2325);
    peer.hash(&mut hasher);
    cluster.hash(&mut hasher);
    // A final mix: FNV's low bits depend weakly on the last bytes.
    let mut x = hasher.finish();
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// The peer `cluster` belongs to among `peers` (ties broken by name); `None` without peers.
pub fn owner<'a>(cluster: &str, peers: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    peers
        .into_iter()
        .max_by_key(|peer| (weight(peer, cluster), *peer))
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn assignment(peers: &[&str], clusters: &[String]) -> BTreeMap<String, String> {
        clusters
            .iter()
            .map(|c| {
                (
                    c.clone(),
                    owner(c, peers.iter().copied())
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn every_cluster_has_one_owner_and_the_load_is_spread() {
        let clusters: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();
        let peers = ["replica-a", "replica-b", "replica-c"];
        let owners = assignment(&peers, &clusters);
        for peer in peers {
            let n = owners.values().filter(|o| *o == peer).count();
            assert!((60..=140).contains(&n), "{peer} owns {n} of 300");
        }
        assert_eq!(owner("x", std::iter::empty()), None);
    }

    #[test]
    fn when_a_peer_leaves_only_its_clusters_move() {
        let clusters: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
        let before = assignment(&["a", "b", "c"], &clusters);
        let after = assignment(&["a", "c"], &clusters);
        for c in &clusters {
            if before[c] != "b" {
                assert_eq!(before[c], after[c], "{c} moved although its owner stayed");
            } else {
                assert!(after[c] == "a" || after[c] == "c");
            }
        }
    }

    #[test]
    fn the_owner_does_not_depend_on_the_order_of_the_peers() {
        for c in ["east", "west", "north"] {
            assert_eq!(owner(c, ["a", "b", "c"]), owner(c, ["c", "a", "b"]));
        }
    }
}
