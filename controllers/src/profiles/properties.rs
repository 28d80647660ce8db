//! The About API consumed: what a member's ClusterProperties (`about.k8s.io`) become in its
//! ClusterProfile (`status.properties`) and on its KubeFedCluster (labels under
//! `about.flotilla.io/`, so placement can select on a cluster's own declared id or region).
//! Pure functions; the profiles controller reads the members and writes.

use std::collections::BTreeMap;

use flotilla_api::{
    KubeFedCluster,
    about::{ClusterProperty, is_property_label, property_labels},
    inventory::Property,
};
use kube::{Resource, ResourceExt};

/// Longest value a ClusterProfile property may hold (the inventory schema's limit); longer
/// ones stay out of the profile.
pub const MAX_PROFILE_VALUE: usize = 1024;

/// A member's properties as the profile lists them: sorted by name, values that fit.
pub fn profile_properties<'a>(
    objects: impl IntoIterator<Item = &'a ClusterProperty>,
) -> Vec<Property> {
    let mut properties: Vec<Property> = objects
        .into_iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .filter(|p| !p.spec.value.is_empty() && p.spec.value.len() <= MAX_PROFILE_VALUE)
        .map(|p| Property {
            name: p.name_any(),
            value: p.spec.value.clone(),
            last_observed_time: None,
        })
        .collect();
    properties.sort_by(|a, b| a.name.cmp(&b.name));
    properties
}

/// The property labels a KubeFedCluster should carry, when its member's properties are known
/// and differ from the labels it carries now; `None` when nothing is to be written.
pub fn label_update(
    kfc: &KubeFedCluster,
    known: Option<&[Property]>,
) -> Option<BTreeMap<String, String>> {
    let properties = known?;
    if kfc.meta().deletion_timestamp.is_some() {
        return None;
    }
    let wanted = property_labels(
        properties
            .iter()
            .map(|p| (p.name.as_str(), p.value.as_str())),
    );
    let current: BTreeMap<String, String> = kfc
        .labels()
        .iter()
        .filter(|(k, _)| is_property_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (wanted != current).then_some(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{KubeFedClusterSpec, about::ClusterPropertySpec};

    fn property(name: &str, value: &str) -> ClusterProperty {
        ClusterProperty::new(
            name,
            ClusterPropertySpec {
                value: value.into(),
            },
        )
    }

    fn cluster(labels: &[(&str, &str)]) -> KubeFedCluster {
        let mut kfc = KubeFedCluster::new("member1", KubeFedClusterSpec::default());
        kfc.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        kfc
    }

    #[test]
    fn properties_are_listed_by_name_and_oversized_values_left_out() {
        let big = "x".repeat(MAX_PROFILE_VALUE + 1);
        let objects = [
            property("zone", "a"),
            property("cluster.clusterset.k8s.io", "id-1"),
            property("blob", &big),
        ];
        let listed = profile_properties(&objects);
        let names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["cluster.clusterset.k8s.io", "zone"]);
        assert_eq!(
            listed[0].last_observed_time, None,
            "no clock: no write per observation"
        );
    }

    #[test]
    fn labels_are_written_only_when_they_differ() {
        let props = profile_properties(&[property("region", "eu")]);
        let unlabeled = cluster(&[("env", "prod")]);
        let update = label_update(&unlabeled, Some(&props)).expect("a label to add");
        assert_eq!(
            update.get("about.flotilla.io/region").map(String::as_str),
            Some("eu")
        );
        assert_eq!(
            update.len(),
            1,
            "only Flotilla's property labels are applied"
        );
        let labeled = cluster(&[("env", "prod"), ("about.flotilla.io/region", "eu")]);
        assert_eq!(label_update(&labeled, Some(&props)), None);
    }

    #[test]
    fn a_removed_property_removes_its_label_and_unknown_properties_change_nothing() {
        let labeled = cluster(&[("about.flotilla.io/region", "eu")]);
        assert_eq!(label_update(&labeled, Some(&[])), Some(BTreeMap::new()));
        assert_eq!(
            label_update(&labeled, None),
            None,
            "an unreachable member keeps its labels"
        );
    }
}
