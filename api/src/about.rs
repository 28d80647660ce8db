//! SIG-Multicluster's About API (KEP-2149), `about.k8s.io/v1alpha1` `ClusterProperty`: a
//! cluster-scoped name/value a cluster declares about itself, such as its id
//! (`cluster.clusterset.k8s.io`) or the ClusterSet it belongs to (`clusterset.k8s.io`).
//! Flotilla reads them from members; it installs the CRD only where asked (`config/member-crds/`).
//! Types and pure label mapping only, no I/O.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the About API.
pub const ABOUT_GROUP: &str = "about.k8s.io";
/// The well-known property holding a cluster's id, unique within its ClusterSet.
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The well-known property naming the ClusterSet the cluster belongs to.
pub const CLUSTERSET_PROPERTY: &str = "clusterset.k8s.io";
/// Prefix of the KubeFedCluster labels Flotilla derives from a member's ClusterProperties:
/// property `cluster.clusterset.k8s.io` becomes label
/// `about.flotilla.io/cluster.clusterset.k8s.io`, which placement selectors can match.
pub const PROPERTY_LABEL_PREFIX: &str = "about.flotilla.io";
/// `*.k8s.io` groups are protected: the API server wants the approving KEP's address.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";
/// The About API's approval (KEP-2149's API review).
pub const API_APPROVAL: &str = "https://github.com/kubernetes/enhancements/pull/3084";

/// A property a cluster declares about itself.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "about.k8s.io",
    version = "v1alpha1",
    kind = "ClusterProperty",
    plural = "clusterproperties",
    derive = "PartialEq",
    printcolumn(name = "Value", type_ = "string", json_path = ".spec.value"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ClusterPropertySpec {
    /// The property's value.
    #[schemars(length(min = 1, max = 128000))]
    pub value: String,
}

/// The KubeFedCluster label for a property, or `None` when the name or value cannot be a
/// label (a value over 63 characters, say): such a property is still published in the
/// ClusterProfile, only not selectable.
pub fn property_label(name: &str, value: &str) -> Option<(String, String)> {
    (is_label_name(name) && is_label_value(value))
        .then(|| (format!("{PROPERTY_LABEL_PREFIX}/{name}"), value.to_string()))
}

/// The labels of every property that fits in one.
pub fn property_labels<'a>(
    properties: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    properties
        .into_iter()
        .filter_map(|(n, v)| property_label(n, v))
        .collect()
}

/// Whether `key` is a label Flotilla derives from a property.
pub fn is_property_label(key: &str) -> bool {
    key.strip_prefix(PROPERTY_LABEL_PREFIX)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The name part of a label key: 1–63 alphanumerics, `-`, `_` or `.`, alphanumeric at both ends.
fn is_label_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && label_chars(s)
}

/// A label value: empty, or like a name.
fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && label_chars(s))
}

fn label_chars(s: &str) -> bool {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    ends(s.chars().next())
        && ends(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn well_known_properties_become_labels_under_the_prefix() {
        assert_eq!(
            property_label(CLUSTER_ID_PROPERTY, "7f0c5d2e-member1"),
            Some((
                "about.flotilla.io/cluster.clusterset.k8s.io".into(),
                "7f0c5d2e-member1".into()
            ))
        );
        assert!(is_property_label("about.flotilla.io/region"));
        assert!(!is_property_label("about.flotilla.iox/region"));
        assert!(!is_property_label("region"));
    }

    #[test]
    fn properties_that_cannot_be_labels_are_left_out() {
        let long = "x".repeat(64);
        let cases = [
            ("region", "eu west", false),
            ("region", "-eu", false),
            ("region", long.as_str(), false),
            (long.as_str(), "eu", false),
            ("bad/name", "eu", false),
            ("region", "", true),
            ("region", "eu-west-1", true),
        ];
        for (name, value, fits) in cases {
            assert_eq!(
                property_label(name, value).is_some(),
                fits,
                "{name}={value}"
            );
        }
        let labels = property_labels([("region", "eu"), ("notes", "not a label")]);
        assert_eq!(labels.len(), 1);
    }

    #[test]
    fn the_crd_is_cluster_scoped() {
        let crd = ClusterProperty::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("clusterproperties.about.k8s.io")
        );
    }
}
