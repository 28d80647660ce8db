//! ClusterSet IPs, pure: every `ClusterSetIP` service of the plan gets one address per IP
//! family from the configured ranges (`KubeFedConfig` `spec.multiClusterServices
//! .clusterSetIPRanges`). Nothing is stored but the imports themselves: the addresses
//! Flotilla wrote are read back from the members' imports (their
//! `mcs.flotilla.io/clusterset-ips` annotation), kept while they are in range and unique, and
//! a new service gets the first free address from a position derived from its name, so a
//! restart or a re-created import changes nothing. `spec.ips` written by another manager are
//! reserved and never overwritten; a service that cannot get an address is reported.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use flotilla_api::mcs::{ServiceImportType, condition};

use super::plan::{MemberView, Plan, ServiceKey, WantedCondition};

/// `IPv4` or `IPv6`, as Services spell them.
pub const IPV4: &str = "IPv4";
/// See [`IPV4`].
pub const IPV6: &str = "IPv6";

/// One configured CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// As configured.
    pub cidr: String,
    v6: bool,
    /// First usable address, as a number.
    first: u128,
    /// Usable addresses.
    count: u128,
}

impl Range {
    /// Parses `a.b.c.d/n` or `x::/n`; the network and broadcast addresses of an IPv4 range
    /// wider than /31 are not used.
    pub fn parse(cidr: &str) -> Result<Range, String> {
        let (addr, len) = cidr
            .split_once('/')
            .ok_or_else(|| format!("{cidr:?} is not a CIDR (address/prefix)"))?;
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{cidr:?}: {addr:?} is not an IP address"))?;
        let bits: u32 = if addr.is_ipv4() { 32 } else { 128 };
        // At most 2^64 addresses, so that positions in the range never overflow.
        let shortest = bits.saturating_sub(64);
        let len: u32 = len
            .trim()
            .parse()
            .ok()
            .filter(|l| *l <= bits && *l >= shortest)
            .ok_or_else(|| format!("{cidr:?}: the prefix length must be {shortest}..={bits}"))?;
        let host_bits = bits - len;
        let size: u128 = 1u128 << host_bits;
        let base = to_number(addr) & !(size.wrapping_sub(1));
        let (first, count) = if addr.is_ipv4() && host_bits >= 2 {
            (base + 1, size - 2)
        } else {
            (base, size)
        };
        Ok(Range {
            cidr: cidr.to_string(),
            v6: addr.is_ipv6(),
            first,
            count,
        })
    }

    /// `IPv4` or `IPv6`.
    pub fn family(&self) -> &'static str {
        if self.v6 { IPV6 } else { IPV4 }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let n = to_number(ip);
        ip.is_ipv6() == self.v6 && n >= self.first && n - self.first < self.count
    }

    fn nth(&self, i: u128) -> IpAddr {
        let n = self.first + i;
        if self.v6 {
            IpAddr::V6(n.into())
        } else {
            // Invariant: an IPv4 range holds 32-bit numbers only.
            IpAddr::V4(u32::try_from(n).unwrap_or(u32::MAX).into())
        }
    }
}

fn to_number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

/// The configured ranges: the first valid one of each family, and what was wrong with the
/// others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    /// Valid ranges, at most one per family.
    pub ranges: Vec<Range>,
    /// Entries that do not parse, or a second range of a family.
    pub errors: Vec<String>,
}

impl Ranges {
    /// Parses the configured CIDRs.
    pub fn parse(cidrs: &[String]) -> Ranges {
        let mut out = Ranges::default();
        for cidr in cidrs {
            match Range::parse(cidr) {
                Ok(r) if out.of(r.family()).is_some() => out
                    .errors
                    .push(format!("{cidr:?}: only one {} range is used", r.family())),
                Ok(r) => out.ranges.push(r),
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    fn of(&self, family: &str) -> Option<&Range> {
        self.ranges.iter().find(|r| r.family() == family)
    }

    /// The family of a service that names none: IPv4 when there is an IPv4 range, else the
    /// first range's.
    fn default_family(&self) -> &'static str {
        if self.of(IPV4).is_some() || self.ranges.is_empty() {
            IPV4
        } else {
            self.ranges[0].family()
        }
    }
}

/// What one service has now: the addresses Flotilla wrote, or addresses someone else wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Addresses from Flotilla's annotation, where `spec.ips` still says the same.
    pub ours: Vec<IpAddr>,
    /// `spec.ips` that another manager wrote.
    pub foreign: Vec<String>,
}

/// The outcome for one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// These addresses, one per family, in the order of the families.
    Assigned(Vec<IpAddr>),
    /// Another manager's `spec.ips`, left alone.
    Foreign(Vec<String>),
    /// No address: the condition's reason and message.
    Failed(&'static str, String),
}

/// A start position in a range derived from the service's name (FNV-1a), so that the same
/// ClusterSet allocates the same addresses in any order and in any process.
fn start(key: &ServiceKey, count: u128) -> u128 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    u128::from(h) % count
}

/// Allocates the ClusterSet IPs of `services` (each with its IP families, empty: the
/// default family), keeping what they hold where it is valid. No range configured at all:
/// nothing (allocation is off, and services are not reported).
pub fn allocate(
    ranges: &Ranges,
    services: &BTreeMap<ServiceKey, (Vec<String>, Held)>,
) -> BTreeMap<ServiceKey, Allocation> {
    if ranges.ranges.is_empty() && ranges.errors.is_empty() {
        // `clusterSetIPRanges: []`: allocation is off.
        return BTreeMap::new();
    }
    let mut taken: BTreeSet<IpAddr> = services
        .values()
        .flat_map(|(_, h)| h.foreign.iter().filter_map(|ip| ip.parse().ok()))
        .collect();
    let mut out = BTreeMap::new();
    let mut partial: BTreeMap<&ServiceKey, Vec<(&str, Option<IpAddr>)>> = BTreeMap::new();
    // First, every address already held: older services keep theirs.
    for (key, (families, held)) in services {
        if !held.foreign.is_empty() {
            out.insert(key.clone(), Allocation::Foreign(held.foreign.clone()));
            continue;
        }
        let families: Vec<&str> = if families.is_empty() {
            vec![ranges.default_family()]
        } else {
            families.iter().map(String::as_str).collect()
        };
        let kept = families
            .into_iter()
            .map(|f| {
                let ip = ranges.of(f).and_then(|r| {
                    held.ours
                        .iter()
                        .copied()
                        .find(|ip| r.contains(*ip) && !taken.contains(ip))
                });
                if let Some(ip) = ip {
                    taken.insert(ip);
                }
                (f, ip)
            })
            .collect();
        partial.insert(key, kept);
    }
    let mut used: BTreeMap<&'static str, u128> = BTreeMap::new();
    for ip in &taken {
        if let Some(r) = ranges.ranges.iter().find(|r| r.contains(*ip)) {
            *used.entry(r.family()).or_default() += 1;
        }
    }
    for (key, kept) in partial {
        let a = complete(ranges, key, kept, &mut taken, &mut used);
        out.insert(key.clone(), a);
    }
    out
}

/// Gives a service the addresses of the families it does not hold yet: the first free one
/// from its name's position in each family's range.
fn complete(
    ranges: &Ranges,
    key: &ServiceKey,
    kept: Vec<(&str, Option<IpAddr>)>,
    taken: &mut BTreeSet<IpAddr>,
    used: &mut BTreeMap<&'static str, u128>,
) -> Allocation {
    let mut ips = Vec::new();
    for (family, ip) in kept {
        if let Some(ip) = ip {
            ips.push(ip);
            continue;
        }
        let Some(range) = ranges.of(family) else {
            let mut message = format!("no valid {family} ClusterSet IP range is configured");
            if !ranges.errors.is_empty() {
                message.push_str(&format!(" ({})", ranges.errors.join("; ")));
            }
            return Allocation::Failed(condition::REASON_NO_RANGE, message);
        };
        let n = used.entry(range.family()).or_default();
        if *n >= range.count {
            let message = format!(
                "every address of the ClusterSet IP range {} is taken",
                range.cidr
            );
            return Allocation::Failed(condition::REASON_RANGE_EXHAUSTED, message);
        }
        let s = start(key, range.count);
        let ip = (0..range.count)
            .map(|i| range.nth((s + i) % range.count))
            .find(|ip| !taken.contains(ip));
        // Invariant: fewer than `count` addresses of the range are taken, so one is free.
        if let Some(ip) = ip {
            taken.insert(ip);
            *n += 1;
            ips.push(ip);
        }
    }
    Allocation::Assigned(ips)
}

/// What the members' imports hold of one service: Flotilla's annotated addresses where
/// `spec.ips` still matches them, else `spec.ips` as another manager's. The first member (by
/// name) holding the import decides.
fn held(members: &[MemberView], key: &ServiceKey) -> Held {
    for m in members {
        let Some(import) = m.imports.get(key) else {
            continue;
        };
        let ours: Vec<String> = import.clusterset_ips.clone().unwrap_or_default();
        if import.spec.ips.is_empty() {
            continue;
        }
        if import.spec.ips == ours {
            return Held {
                ours: ours.iter().filter_map(|ip| ip.parse().ok()).collect(),
                foreign: Vec::new(),
            };
        }
        return Held {
            ours: Vec::new(),
            foreign: import.spec.ips.clone(),
        };
    }
    Held::default()
}

fn allocated_condition(a: &Allocation) -> WantedCondition {
    let (status, reason, message) = match a {
        Allocation::Assigned(ips) => (
            true,
            condition::REASON_ALLOCATED.to_string(),
            format!(
                "ClusterSet IPs {}",
                ips.iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Allocation::Foreign(ips) => (
            false,
            condition::REASON_IPS_OF_ANOTHER_MANAGER.to_string(),
            format!(
                "spec.ips ({}) was written by another manager; Flotilla leaves it as it is",
                ips.join(", ")
            ),
        ),
        Allocation::Failed(reason, message) => (false, reason.to_string(), message.clone()),
    };
    WantedCondition {
        type_: condition::IPS_ALLOCATED,
        status,
        reason,
        message,
    }
}

/// Gives every ClusterSetIP service of the plan its addresses (`spec.ips` and
/// [`super::plan::MergedService::clusterset_ips`]), and the `ClusterSetIPAllocated`
/// condition to its import and to each of its valid exports.
pub fn assign(plan: &mut Plan, members: &[MemberView], ranges: &Ranges) {
    let wanted: BTreeMap<ServiceKey, (Vec<String>, Held)> = plan
        .services
        .iter()
        .filter(|(_, s)| s.spec.type_ == ServiceImportType::ClusterSetIP)
        .map(|(k, s)| (k.clone(), (s.spec.ip_families.clone(), held(members, k))))
        .collect();
    let allocations = allocate(ranges, &wanted);
    for (key, service) in plan.services.iter_mut() {
        let Some(a) = allocations.get(key) else {
            service.spec.ips.clear();
            service.clusterset_ips = None;
            continue;
        };
        let ips: Vec<String> = match a {
            Allocation::Assigned(ips) => ips.iter().map(IpAddr::to_string).collect(),
            Allocation::Foreign(_) | Allocation::Failed(..) => Vec::new(),
        };
        service.spec.ips = ips.clone();
        service.clusterset_ips = matches!(a, Allocation::Assigned(_)).then_some(ips);
        let c = allocated_condition(a);
        service
            .import_conditions
            .retain(|c| c.type_ != condition::IPS_ALLOCATED);
        service.import_conditions.push(c.clone());
        for v in plan.exports.iter_mut().filter(|v| &v.key == key) {
            let valid = v
                .conditions
                .iter()
                .any(|c| c.type_ == condition::VALID && c.status);
            if valid {
                v.conditions.push(c.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "ips_tests.rs"]
mod tests;
