//! A member's resource summary (KubeFedCluster `status.resources`) as SIG-Multicluster
//! ClusterProfile `status.properties`, coarse enough that pods coming and going do not
//! rewrite the profile. Pure: the profiles controller adds these to each profile.
//!
//! The rule: allocatable CPU and memory and the Ready nodes are published exactly (they
//! change with nodes only); *available* CPU and memory (allocatable minus requested) are
//! published in steps of a tenth of the allocatable (at least 100m CPU, 1Mi memory), rounded
//! to the nearest step, and only rewritten once the real value is a whole step away from
//! the published one. A profile is therefore written at most once per tenth of a member's capacity that
//! fills or frees, never for one pod that comes and goes, never at steady state, and never
//! after a restart (the inputs are the KubeFedCluster and the profile as stored).

use flotilla_api::{core::ClusterResources, inventory::Property};

use crate::capacity::{format_cpu, format_memory, quantity_millis};

/// The prefix of every resource property Flotilla publishes.
pub const PREFIX: &str = "resources.flotilla.io/";

/// Whether `name` is one of the resource properties (a member's own About API properties
/// of these names are left out: the summary is the control plane's to say).
pub fn is_resource_property(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// One resource: its key in the summary, its property stem, its smallest step (in
/// thousandths of its unit) and how it is written.
struct Kind {
    key: &'static str,
    min_step: i128,
    format: fn(i128) -> String,
}

const KINDS: [Kind; 2] = [
    Kind {
        key: "cpu",
        min_step: 100,
        format: format_cpu,
    },
    Kind {
        key: "memory",
        min_step: 1_048_576_000,
        format: |millis| format_memory(millis / 1000),
    },
];

/// The resource properties of a summary (none without one), sorted by name. `current` are
/// the profile's properties now: an available value within a step of the published one
/// stays as it is.
pub fn resource_properties(
    summary: Option<&ClusterResources>,
    current: &[Property],
) -> Vec<Property> {
    let Some(s) = summary else {
        return Vec::new();
    };
    let mut out = vec![property("ready-nodes", s.ready_nodes.to_string())];
    for kind in &KINDS {
        let Some(alloc_text) = s.allocatable.get(kind.key) else {
            continue;
        };
        let Some(alloc) = quantity_millis(alloc_text) else {
            continue;
        };
        out.push(property(
            &format!("{}-allocatable", kind.key),
            (kind.format)(alloc),
        ));
        let requested = s
            .requested
            .get(kind.key)
            .and_then(|q| quantity_millis(q))
            .unwrap_or(0);
        let available = (alloc - requested).max(0);
        let step = (alloc / 10 / kind.min_step * kind.min_step).max(kind.min_step);
        let name = format!("{}-available", kind.key);
        let published = current
            .iter()
            .find(|p| p.name == format!("{PREFIX}{name}"))
            .and_then(|p| Some((p.value.clone(), quantity_millis(&p.value)?)))
            .filter(|(_, v)| (available - v).abs() < step && *v <= alloc);
        let value = match published {
            Some((text, _)) => text,
            None => (kind.format)(((available + step / 2) / step * step).min(alloc)),
        };
        out.push(property(&name, value));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn property(stem: &str, value: String) -> Property {
    Property {
        name: format!("{PREFIX}{stem}"),
        value,
        last_observed_time: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn summary(cpu: (&str, &str), memory: (&str, &str)) -> ClusterResources {
        ClusterResources {
            nodes: 2,
            ready_nodes: 2,
            allocatable: BTreeMap::from([
                ("cpu".to_string(), cpu.0.to_string()),
                ("memory".to_string(), memory.0.to_string()),
            ]),
            requested: BTreeMap::from([
                ("cpu".to_string(), cpu.1.to_string()),
                ("memory".to_string(), memory.1.to_string()),
            ]),
            pods: 3,
        }
    }

    fn value<'a>(props: &'a [Property], stem: &str) -> Option<&'a str> {
        props
            .iter()
            .find(|p| p.name == format!("{PREFIX}{stem}"))
            .map(|p| p.value.as_str())
    }

    #[test]
    fn allocatable_is_exact_and_available_is_rounded_to_a_tenth() {
        let p = resource_properties(Some(&summary(("8", "2500m"), ("10Gi", "1Gi"))), &[]);
        assert_eq!(value(&p, "cpu-allocatable"), Some("8"));
        // 5.5 CPUs free, steps of 800m: 5.6.
        assert_eq!(value(&p, "cpu-available"), Some("5600m"));
        assert_eq!(value(&p, "memory-allocatable"), Some("10Gi"));
        // 9Gi free, steps of 1Gi: 9Gi.
        assert_eq!(value(&p, "memory-available"), Some("9Gi"));
        assert_eq!(value(&p, "ready-nodes"), Some("2"));
        let names: Vec<_> = p.iter().map(|p| p.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn a_change_smaller_than_a_step_keeps_the_published_value() {
        let first = resource_properties(Some(&summary(("8", "2500m"), ("10Gi", "1Gi"))), &[]);
        // Pods come and go: within 800m of the published 5.6 each time.
        for requested in ["2600m", "2000m", "3000m"] {
            let next =
                resource_properties(Some(&summary(("8", requested), ("10Gi", "1Gi"))), &first);
            assert_eq!(next, first, "requested {requested}");
        }
        // 4 CPUs more requested: a new value.
        let full = resource_properties(Some(&summary(("8", "6500m"), ("10Gi", "1Gi"))), &first);
        assert_eq!(value(&full, "cpu-available"), Some("1600m"));
    }

    #[test]
    fn small_members_use_the_smallest_step_and_overcommit_reads_as_nothing_free() {
        let p = resource_properties(Some(&summary(("500m", "900m"), ("100Mi", "0"))), &[]);
        assert_eq!(value(&p, "cpu-available"), Some("0"));
        let p = resource_properties(Some(&summary(("850m", "0"), ("100Mi", "0"))), &[]);
        assert_eq!(
            value(&p, "cpu-available"),
            Some("850m"),
            "never above allocatable"
        );
        assert_eq!(value(&p, "memory-available"), Some("100Mi"));
    }

    #[test]
    fn no_summary_no_properties_and_unreadable_quantities_are_left_out() {
        assert!(resource_properties(None, &[]).is_empty());
        let p = resource_properties(Some(&summary(("lots", "0"), ("1Gi", "0"))), &[]);
        assert_eq!(value(&p, "cpu-allocatable"), None);
        assert_eq!(value(&p, "memory-allocatable"), Some("1Gi"));
        assert!(is_resource_property("resources.flotilla.io/cpu-available"));
        assert!(!is_resource_property("cluster.clusterset.k8s.io"));
    }
}
