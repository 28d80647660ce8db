//! Pod IPs of one simulated cluster: each cluster owns the /16 `10.<64 + index>.0.0`, so pod
//! IPs are unique within a cluster and do not repeat across the clusters of an environment.
//! Addresses are handed out lowest-free first and given back when their pod is gone.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The first second octet; `10.64.0.0/10` is far from the service range `10.96.0.0/16`
/// only for indexes below 32, which is more clusters than a machine runs.
const SECOND_OCTET_BASE: usize = 64;

/// The addresses of one cluster's /16 and which of them pods hold.
#[derive(Debug, Clone)]
pub(crate) struct IpPool {
    second_octet: u8,
    used: BTreeSet<u16>,
}

impl IpPool {
    /// The pool of the cluster at `index` in the environment (0 is the host).
    pub(crate) fn new(index: usize) -> Self {
        let octet = (SECOND_OCTET_BASE + index).min(u8::MAX as usize);
        IpPool {
            // Clamped to u8::MAX just above.
            second_octet: u8::try_from(octet).unwrap_or(u8::MAX),
            used: BTreeSet::new(),
        }
    }

    /// The host part of `ip` when it is in this pool.
    fn host_part(&self, ip: &str) -> Option<u16> {
        let ip: Ipv4Addr = ip.parse().ok()?;
        let [a, b, c, d] = ip.octets();
        (a == 10 && b == self.second_octet).then_some(u16::from_be_bytes([c, d]))
    }

    /// Records that a pod already holds `ip` (seen after a restart of the kubelet); false
    /// when the address is not from this pool.
    pub(crate) fn claim(&mut self, ip: &str) -> bool {
        match self.host_part(ip) {
            Some(host) => {
                self.used.insert(host);
                true
            }
            None => false,
        }
    }

    /// The lowest free address (never the network's `.0.0` nor `.255.255`), now held.
    pub(crate) fn allocate(&mut self) -> Option<String> {
        let host = (1..u16::MAX).find(|h| !self.used.contains(h))?;
        self.used.insert(host);
        let [c, d] = host.to_be_bytes();
        Some(Ipv4Addr::new(10, self.second_octet, c, d).to_string())
    }

    /// Gives `ip` back to the pool (a pod that is gone).
    pub(crate) fn release(&mut self, ip: &str) {
        if let Some(host) = self.host_part(ip) {
            self.used.remove(&host);
        }
    }

    /// How many addresses pods hold.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_handed_out_lowest_first_and_never_twice() {
        let mut pool = IpPool::new(1);
        assert_eq!(pool.allocate().as_deref(), Some("10.65.0.1"));
        assert_eq!(pool.allocate().as_deref(), Some("10.65.0.2"));
        assert_eq!(pool.held(), 2);
    }

    #[test]
    fn a_released_address_is_reused() {
        let mut pool = IpPool::new(1);
        let first = pool.allocate().expect("an address");
        pool.allocate().expect("an address");
        pool.release(&first);
        assert_eq!(pool.allocate(), Some(first));
    }

    #[test]
    fn claimed_addresses_of_running_pods_are_skipped() {
        let mut pool = IpPool::new(2);
        assert!(pool.claim("10.66.0.1"));
        assert_eq!(pool.allocate().as_deref(), Some("10.66.0.2"));
    }

    #[test]
    fn addresses_of_another_cluster_are_neither_claimed_nor_released() {
        let mut pool = IpPool::new(1);
        assert!(!pool.claim("10.66.0.1"));
        assert!(!pool.claim("not an ip"));
        let ip = pool.allocate().expect("an address");
        pool.release("10.66.0.1");
        assert_eq!(pool.held(), 1);
        assert_eq!(ip, "10.65.0.1");
    }

    #[test]
    fn two_clusters_never_hand_out_the_same_address() {
        let mut a = IpPool::new(1);
        let mut b = IpPool::new(2);
        assert_ne!(a.allocate(), b.allocate());
    }

    #[test]
    fn the_host_part_crosses_the_third_octet() {
        let mut pool = IpPool::new(1);
        for _ in 0..255 {
            pool.allocate();
        }
        assert_eq!(pool.allocate().as_deref(), Some("10.65.1.0"));
    }
}
