//! Which members one member RBAC controller covers: all of them (one controller-manager
//! does everything), or — with member work sharded over the replicas
//! (`--shard-member-work`, [`crate::sharded`]) — the Pull members on the leader (their
//! roles are published in the host) and the Push members of its share on each replica.

/// The members a member RBAC controller covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every member: Push members in the cluster set, and every Pull member.
    All,
    /// Only Pull members (their roles are written in the host, by the leader).
    Pull,
    /// Only Push members of the cluster set (a replica's share).
    Push,
}

impl Scope {
    /// Whether a member, Pull or not, is this controller's.
    pub fn covers(self, pull: bool) -> bool {
        match self {
            Scope::All => true,
            Scope::Pull => pull,
            Scope::Push => !pull,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_covered_by_exactly_one_of_the_sharded_scopes() {
        for pull in [false, true] {
            assert!(Scope::All.covers(pull));
            assert_eq!(
                [Scope::Pull, Scope::Push]
                    .iter()
                    .filter(|s| s.covers(pull))
                    .count(),
                1,
                "pull: {pull}"
            );
        }
    }
}
