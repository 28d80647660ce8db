//! `status.drift` of a federated object (a Flotilla extension): the bounded entry a person
//! reads for a member object that another writer changed after Flotilla applied it, and
//! the states it reports. Finding, attributing and repairing drift is
//! `flotilla_core::drift`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What became of a cluster's drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriftState {
    /// Flotilla applied the desired object again.
    Repaired,
    /// Left in place: the policy is `Report`, or the repair failed.
    Detected,
    /// Repairs stopped: another writer kept rewriting the same fields.
    Fight,
}

impl DriftState {
    /// Every state.
    pub const ALL: [DriftState; 3] = [
        DriftState::Repaired,
        DriftState::Detected,
        DriftState::Fight,
    ];

    /// As written in `status.drift[].state`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DriftState::Repaired => "Repaired",
            DriftState::Detected => "Detected",
            DriftState::Fight => "Fight",
        }
    }

    /// The Event reason announcing this state.
    pub const fn event_reason(self) -> &'static str {
        match self {
            DriftState::Repaired => "DriftRepaired",
            DriftState::Detected => "DriftDetected",
            DriftState::Fight => "DriftFight",
        }
    }

    /// A state as written in status.
    pub fn parse(s: &str) -> Option<DriftState> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// Flotilla extension of a federated object's status: the last drift seen in one cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDrift {
    /// The member cluster.
    pub cluster: String,
    /// `Repaired`, `Detected` or `Fight`.
    pub state: String,
    /// The fields that differed from the desired object (at most 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<DriftField>,
    /// How many more fields differed than are listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_fields: u32,
    /// The field managers that own those fields in the member now (from `managedFields`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managers: Vec<DriftManager>,
    /// When Flotilla saw the drift (RFC 3339).
    pub detected_at: String,
    /// When Flotilla applied the desired object again (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired_at: Option<String>,
}

/// One drifted field: its path, and the desired and live values (JSON, cut to 120
/// characters; a Secret's values redacted).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftField {
    /// Dotted field path (`spec.template.spec.containers[0].image`).
    pub path: String,
    /// What Flotilla applies.
    pub desired: String,
    /// What the member holds (`<absent>` when the field was removed).
    pub live: String,
}

/// A field manager of the member object: who wrote a drifted field, how and when.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftManager {
    /// The field manager (`kubectl-edit`, `kube-controller-manager`, an operator's name).
    pub manager: String,
    /// `Update` or `Apply`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// When it last wrote the object (RFC 3339), as `managedFields` records it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ClusterDrift {
    /// One line for Events, logs and the CLI: the fields and who wrote them.
    pub fn summary(&self) -> String {
        let mut fields: Vec<&str> = self.fields.iter().map(|f| f.path.as_str()).collect();
        let more = if self.more_fields > 0 {
            format!(" and {} more", self.more_fields)
        } else {
            String::new()
        };
        fields.dedup();
        let by = if self.managers.is_empty() {
            "an unknown writer".to_string()
        } else {
            self.managers
                .iter()
                .map(|m| match m.operation.as_str() {
                    "" => m.manager.clone(),
                    op => format!("{} ({op})", m.manager),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("{}{more} changed by {by}", fields.join(", "))
    }

    /// The drift in one line for a person: state, fields with desired → live values,
    /// writers with operation and time, when detected and repaired (`flotilla status`,
    /// `flotilla diff`, the dashboard).
    pub fn describe(&self) -> String {
        let d = self;
        let fields: Vec<String> = d
            .fields
            .iter()
            .map(|f| format!("{} ({} → {})", f.path, f.desired, f.live))
            .collect();
        let more = match d.more_fields {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let by: Vec<String> = d
            .managers
            .iter()
            .map(|m| match (m.operation.as_str(), m.time.as_str()) {
                ("", "") => m.manager.clone(),
                (op, "") => format!("{} ({op})", m.manager),
                ("", t) => format!("{} at {t}", m.manager),
                (op, t) => format!("{} ({op}) at {t}", m.manager),
            })
            .collect();
        let by = if by.is_empty() {
            "an unknown writer".to_string()
        } else {
            by.join(", ")
        };
        let when = match &d.repaired_at {
            Some(at) => format!("detected {}, repaired {at}", d.detected_at),
            None => format!("detected {}", d.detected_at),
        };
        format!(
            "drift in {} {}: {}{more} changed by {by}; {when}",
            d.cluster,
            d.state,
            fields.join(", ")
        )
    }

    /// The first manager's name, for metric labels (`unknown` without one).
    pub fn first_manager(&self) -> &str {
        self.managers
            .first()
            .map_or("unknown", |m| m.manager.as_str())
    }
}
