//! Kubernetes label selectors (`metav1.LabelSelector`): the type, as placement, rollout
//! groups and scheduling preferences write it, and its evaluation against a label set.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Kubernetes label selector (metav1.LabelSelector).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all match exactly.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One expression of a label selector.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error(
        "clusterSelector: matchExpressions key {key:?}: unknown operator {operator:?} (want In, NotIn, Exists or DoesNotExist)"
    )]
    UnknownOperator {
        /// The label key of the expression.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `In` or `NotIn` without any value.
    #[error(
        "clusterSelector: matchExpressions key {key:?}: operator {operator} needs at least one value"
    )]
    MissingValues {
        /// The label key of the expression.
        key: String,
        /// `In` or `NotIn`.
        operator: String,
    },
    /// `Exists` or `DoesNotExist` with values.
    #[error("clusterSelector: matchExpressions key {key:?}: operator {operator} takes no values")]
    UnexpectedValues {
        /// The label key of the expression.
        key: String,
        /// `Exists` or `DoesNotExist`.
        operator: String,
    },
    /// An expression with an empty key.
    #[error("clusterSelector: matchExpressions: a key must not be empty")]
    EmptyKey,
}

/// A validated selector expression.
enum Requirement<'a> {
    In(&'a str, &'a [String]),
    NotIn(&'a str, &'a [String]),
    Exists(&'a str),
    DoesNotExist(&'a str),
}

impl<'a> Requirement<'a> {
    fn parse(req: &'a LabelSelectorRequirement) -> Result<Self, PlacementError> {
        let key = req.key.as_str();
        if key.is_empty() {
            return Err(PlacementError::EmptyKey);
        }
        let with_values = |make: fn(&'a str, &'a [String]) -> Self| {
            if req.values.is_empty() {
                Err(PlacementError::MissingValues {
                    key: key.to_string(),
                    operator: req.operator.clone(),
                })
            } else {
                Ok(make(key, &req.values))
            }
        };
        let without_values = |make: fn(&'a str) -> Self| {
            if req.values.is_empty() {
                Ok(make(key))
            } else {
                Err(PlacementError::UnexpectedValues {
                    key: key.to_string(),
                    operator: req.operator.clone(),
                })
            }
        };
        match req.operator.as_str() {
            "In" => with_values(Requirement::In),
            "NotIn" => with_values(Requirement::NotIn),
            "Exists" => without_values(Requirement::Exists),
            "DoesNotExist" => without_values(Requirement::DoesNotExist),
            _ => Err(PlacementError::UnknownOperator {
                key: key.to_string(),
                operator: req.operator.clone(),
            }),
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(key, values) => labels.get(*key).is_some_and(|v| values.contains(v)),
            // As in Kubernetes, a missing label satisfies NotIn.
            Requirement::NotIn(key, values) => labels.get(*key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(*key),
            Requirement::DoesNotExist(key) => !labels.contains_key(*key),
        }
    }
}

/// A selector checked once, then evaluated against many label sets.
pub struct CompiledSelector<'a> {
    match_labels: &'a BTreeMap<String, String>,
    requirements: Vec<Requirement<'a>>,
}

impl<'a> CompiledSelector<'a> {
    /// Checks every expression of `sel`.
    pub fn new(sel: &'a LabelSelector) -> Result<Self, PlacementError> {
        Ok(CompiledSelector {
            match_labels: &sel.match_labels,
            requirements: sel
                .match_expressions
                .iter()
                .map(Requirement::parse)
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// Whether `labels` satisfy the selector: every `matchLabels` entry and every
/// `matchExpressions` requirement. An empty selector matches everything.
///
/// The selector is validated before any label is looked at, so a malformed selector is an
/// error whatever the labels are.
pub fn matches_selector(
    sel: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, PlacementError> {
    Ok(CompiledSelector::new(sel)?.matches(labels))
}
