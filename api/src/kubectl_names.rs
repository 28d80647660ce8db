//! The names `kubectl` takes a resource by — a CRD's plural, singular, kind and short names —
//! and the pure check that no two CRDs of one install answer to the same one.
//!
//! When two CRDs of different groups share a name, `kubectl get NAME` picks one group by
//! discovery order and never says so: with kubefed's alpha CRDs beside v1beta1,
//! `kubectl get federatedconfigmaps` read `types.kubefed.k8s.io` and found nothing while
//! v1beta1 objects existed. This module only reads CRDs; which CRDs an install holds is the
//! caller's business (`config/kustomization.yaml`, [`crate::crdgen::default_crds`]).

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Which of a CRD's names a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameRole {
    /// `spec.names.plural`.
    Plural,
    /// `spec.names.singular` (the lower-cased kind when unset, as the API server defaults it).
    Singular,
    /// `spec.names.kind`, which kubectl matches case-insensitively.
    Kind,
    /// One of `spec.names.shortNames`.
    ShortName,
}

impl NameRole {
    /// The role as written in a message.
    pub const fn as_str(self) -> &'static str {
        match self {
            NameRole::Plural => "plural",
            NameRole::Singular => "singular",
            NameRole::Kind => "kind",
            NameRole::ShortName => "short name",
        }
    }
}

/// One name a CRD answers to on kubectl's command line, lower-cased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubectlName {
    /// The name as kubectl compares it (lower case).
    pub name: String,
    /// Which of the CRD's names it is.
    pub role: NameRole,
}

/// The names `kubectl get NAME` resolves to `crd`: plural, singular, kind and short names,
/// lower-cased, each once (a singular equal to the lower-cased kind is listed as the
/// singular).
pub fn kubectl_names(crd: &CustomResourceDefinition) -> Vec<KubectlName> {
    let names = &crd.spec.names;
    let kind = names.kind.to_lowercase();
    let singular = names
        .singular
        .as_deref()
        .filter(|s| !s.is_empty())
        .map_or_else(|| kind.clone(), str::to_lowercase);
    let mut out: Vec<KubectlName> = Vec::new();
    let roles = [
        (names.plural.to_lowercase(), NameRole::Plural),
        (singular, NameRole::Singular),
        (kind, NameRole::Kind),
    ]
    .into_iter()
    .chain(
        names
            .short_names
            .iter()
            .flatten()
            .map(|s| (s.to_lowercase(), NameRole::ShortName)),
    );
    for (name, role) in roles {
        if !name.is_empty() && !out.iter().any(|n| n.name == name) {
            out.push(KubectlName { name, role });
        }
    }
    out
}

/// A name two CRDs answer to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameClash {
    /// The shared name (lower case).
    pub name: String,
    /// The first CRD (`metadata.name`) and which of its names it is.
    pub first: (String, NameRole),
    /// The second CRD and which of its names it is.
    pub second: (String, NameRole),
}

impl fmt::Display for NameClash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`kubectl get {}` is ambiguous: the {} of {} and the {} of {}",
            self.name,
            self.first.1.as_str(),
            self.first.0,
            self.second.1.as_str(),
            self.second.0
        )
    }
}

/// Every name that two CRDs of `crds` answer to, each pair of CRDs compared once, in the
/// order given. The same CRD listed twice (equal `metadata.name`) is not a clash.
pub fn name_clashes(crds: &[CustomResourceDefinition]) -> Vec<NameClash> {
    let named: Vec<(String, Vec<KubectlName>)> = crds
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                kubectl_names(c),
            )
        })
        .collect();
    let mut clashes = Vec::new();
    for (i, (first, first_names)) in named.iter().enumerate() {
        for (second, second_names) in named.iter().skip(i + 1) {
            if first == second {
                continue;
            }
            for a in first_names {
                if let Some(b) = second_names.iter().find(|b| b.name == a.name) {
                    clashes.push(NameClash {
                        name: a.name.clone(),
                        first: (first.clone(), a.role),
                        second: (second.clone(), b.role),
                    });
                }
            }
        }
    }
    clashes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdgen::{self, OptionalApi};
    use serde_json::json;

    fn crd(group: &str, plural: &str, kind: &str, short: &[&str]) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {
                "group": group,
                "names": {"plural": plural, "kind": kind, "shortNames": short},
                "scope": "Namespaced",
                "versions": []
            }
        }))
        .expect("a CRD")
    }

    fn roles(clashes: &[NameClash]) -> Vec<(&str, NameRole, NameRole)> {
        clashes
            .iter()
            .map(|c| (c.name.as_str(), c.first.1, c.second.1))
            .collect()
    }

    #[test]
    fn a_crd_answers_to_its_plural_singular_kind_and_short_names_in_lower_case() {
        let names = kubectl_names(&crd("x.io", "widgets", "Widget", &["wd"]));
        let listed: Vec<(&str, NameRole)> =
            names.iter().map(|n| (n.name.as_str(), n.role)).collect();
        // The singular defaults to the lower-cased kind, and is listed once.
        assert_eq!(
            listed,
            [
                ("widgets", NameRole::Plural),
                ("widget", NameRole::Singular),
                ("wd", NameRole::ShortName)
            ]
        );
    }

    #[test]
    fn a_v1beta1_type_and_its_alpha_twin_share_plural_and_singular_but_no_short_name() {
        let target = &crdgen::default_target_types()[1];
        let beta = crdgen::federated_crd(target, None);
        let alpha = crate::alpha::alpha_crd(target, None);
        let clashes = name_clashes(&[beta, alpha]);
        assert_eq!(
            roles(&clashes),
            [
                ("federatedconfigmaps", NameRole::Plural, NameRole::Plural),
                ("federatedconfigmap", NameRole::Singular, NameRole::Singular),
            ]
        );
        assert_eq!(
            clashes[0].to_string(),
            "`kubectl get federatedconfigmaps` is ambiguous: the plural of \
             federatedconfigmaps.types.kubefed.io and the plural of \
             federatedconfigmaps.types.kubefed.k8s.io"
        );
    }

    #[test]
    fn flotillas_and_admiraltys_imports_share_every_name_but_the_short_names() {
        let flotilla = crdgen::default_crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "ServiceAccountImport")
            .expect("Flotilla's import CRD");
        let mut crds = vec![flotilla];
        crds.extend(OptionalApi::Admiralty.crds());
        assert_eq!(
            roles(&name_clashes(&crds)),
            [
                ("serviceaccountimports", NameRole::Plural, NameRole::Plural),
                (
                    "serviceaccountimport",
                    NameRole::Singular,
                    NameRole::Singular
                ),
            ]
        );
    }

    #[test]
    fn a_short_name_is_a_clash_with_any_name_of_another_crd() {
        let a = crd("a.io", "widgets", "Widget", &["gadgets"]);
        let b = crd("b.io", "gadgets", "Gadget", &["wd"]);
        let c = crd("c.io", "sprockets", "Sprocket", &["wd"]);
        assert_eq!(
            roles(&name_clashes(&[a, b, c])),
            [
                ("gadgets", NameRole::ShortName, NameRole::Plural),
                ("wd", NameRole::ShortName, NameRole::ShortName),
            ]
        );
    }

    #[test]
    fn the_same_crd_twice_is_not_a_clash() {
        let a = crd("a.io", "widgets", "Widget", &["wd"]);
        assert_eq!(name_clashes(&[a.clone(), a]), []);
    }

    #[test]
    fn mcs_and_flotillas_multicluster_kinds_answer_to_different_names() {
        let crds: Vec<_> = crdgen::default_crds()
            .into_iter()
            .filter(|c| {
                [
                    crate::multicluster::MULTICLUSTER_GROUP,
                    crate::mcs::MCS_GROUP,
                ]
                .contains(&c.spec.group.as_str())
            })
            .collect();
        // ServiceAccountImport, ServiceExportReport; ServiceExport, ServiceImport, Work,
        // AppliedWork, ClusterProfile, PlacementDecision.
        let names: Vec<_> = crds.iter().map(|c| c.metadata.name.clone()).collect();
        assert_eq!(crds.len(), 8, "{names:?}");
        assert_eq!(name_clashes(&crds), []);
    }

    #[test]
    fn the_default_crds_answer_to_distinct_names_and_each_optional_api_would_clash() {
        let default = crdgen::default_crds();
        assert_eq!(name_clashes(&default), []);
        for api in OptionalApi::ALL {
            assert_eq!(name_clashes(&api.crds()), [], "{api:?} alone");
            let mut with = default.clone();
            with.extend(api.crds());
            assert!(
                !name_clashes(&with).is_empty(),
                "{api:?} is opt-in for this"
            );
        }
    }
}
