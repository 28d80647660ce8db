//! What `flotilla diff` reports per member cluster, from what it found there: the object
//! the controller would write (rendered by the member's dry-run apply) and the live one.
//! Also the exit code (as `kubectl diff`: 0 nothing would change, 1 something would, 2 an
//! error) and the summary line. Pure.

use std::collections::BTreeMap;

use serde_json::Value;

use flotilla_controllers::preview::render::strip_noise;

/// The live member object, as far as the diff cares.
#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// The member has no such object.
    Absent,
    /// The member has it; `managed` when it carries `kubefed.io/managed=true`.
    Present {
        /// The object.
        object: Value,
        /// Whether Flotilla manages it.
        managed: bool,
    },
}

/// What would happen to the object in one cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Placed and absent: the controller would create it.
    Create {
        /// The object as the member would store it.
        after: Value,
    },
    /// Placed and present but different: the controller would update it.
    Update {
        /// The live object.
        before: Value,
        /// The object after the controller's apply.
        after: Value,
        /// The live object is not Flotilla's (the controller adopts it only with
        /// `adoptResources`, otherwise reports `AlreadyExists`).
        adopted: bool,
    },
    /// Placed, present and equal.
    Unchanged,
    /// No longer placed but a managed object is there: the controller would delete it.
    Delete {
        /// The live object.
        before: Value,
    },
    /// The object for this cluster could not be computed or rendered.
    Failed(String),
}

impl Change {
    /// The one-line verdict of the summary list.
    pub fn verdict(&self) -> String {
        match self {
            Change::Create { .. } => "would be created".into(),
            Change::Update { adopted: false, .. } => "would be updated".into(),
            Change::Update { adopted: true, .. } => {
                "would be updated (not managed yet: adopted only with adoptResources)".into()
            }
            Change::Unchanged => "unchanged".into(),
            Change::Delete { .. } => "would be deleted (no longer placed)".into(),
            Change::Failed(message) => format!("error: {message}"),
        }
    }
}

/// The change in one cluster. `rendered` is the controller's object after the member's
/// dry-run apply (`None` when the cluster is not placed); `Err` says why there is none.
/// `None` when the object neither is nor would be in the cluster.
pub fn decide(rendered: Option<Result<Value, String>>, live: Live) -> Option<Change> {
    match (rendered, live) {
        (Some(Err(message)), _) => Some(Change::Failed(message)),
        (Some(Ok(after)), Live::Absent) => Some(Change::Create { after }),
        (Some(Ok(after)), Live::Present { object, managed }) => {
            if strip_noise(&after) == strip_noise(&object) {
                Some(Change::Unchanged)
            } else {
                Some(Change::Update {
                    before: object,
                    after,
                    adopted: !managed,
                })
            }
        }
        (
            None,
            Live::Present {
                object,
                managed: true,
            },
        ) => Some(Change::Delete { before: object }),
        (None, Live::Absent | Live::Present { managed: false, .. }) => None,
    }
}

/// `kubectl diff`'s exit code: 2 when any cluster failed, else 1 when anything would
/// change, else 0.
pub fn exit_code<'a>(changes: impl IntoIterator<Item = &'a Change>) -> u8 {
    let mut code = 0;
    for change in changes {
        code = code.max(match change {
            Change::Failed(_) => 2,
            Change::Unchanged => 0,
            _ => 1,
        });
    }
    code
}

/// `N cluster(s): C to create, U to update, D to delete, K unchanged[, F failed]`.
pub fn summary(changes: &BTreeMap<String, Change>) -> String {
    let count = |f: fn(&Change) -> bool| changes.values().filter(|c| f(c)).count();
    let mut line = format!(
        "{} cluster(s): {} to create, {} to update, {} to delete, {} unchanged",
        changes.len(),
        count(|c| matches!(c, Change::Create { .. })),
        count(|c| matches!(c, Change::Update { .. })),
        count(|c| matches!(c, Change::Delete { .. })),
        count(|c| matches!(c, Change::Unchanged)),
    );
    let failed = count(|c| matches!(c, Change::Failed(_)));
    if failed > 0 {
        line.push_str(&format!(", {failed} failed"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn present(data: &str, managed: bool) -> Live {
        Live::Present {
            object: json!({"metadata": {"name": "a", "uid": "u1"}, "data": {"k": data}}),
            managed,
        }
    }

    fn rendered(data: &str) -> Option<Result<Value, String>> {
        Some(Ok(
            json!({"metadata": {"name": "a", "uid": "u2"}, "data": {"k": data}}),
        ))
    }

    #[test]
    fn a_placed_cluster_without_the_object_gains_it() {
        assert!(matches!(
            decide(rendered("v"), Live::Absent),
            Some(Change::Create { .. })
        ));
    }

    #[test]
    fn equal_objects_up_to_server_noise_are_unchanged() {
        assert_eq!(
            decide(rendered("v"), present("v", true)),
            Some(Change::Unchanged)
        );
    }

    #[test]
    fn a_different_object_is_updated_and_an_unmanaged_one_is_flagged() {
        assert!(matches!(
            decide(rendered("new"), present("old", true)),
            Some(Change::Update { adopted: false, .. })
        ));
        assert!(matches!(
            decide(rendered("new"), present("old", false)),
            Some(Change::Update { adopted: true, .. })
        ));
    }

    #[test]
    fn a_cluster_no_longer_placed_loses_only_a_managed_object() {
        assert!(matches!(
            decide(None, present("v", true)),
            Some(Change::Delete { .. })
        ));
        assert_eq!(decide(None, present("v", false)), None);
        assert_eq!(decide(None, Live::Absent), None);
    }

    #[test]
    fn a_cluster_whose_object_cannot_be_computed_fails() {
        assert_eq!(
            decide(Some(Err("bad override".into())), Live::Absent),
            Some(Change::Failed("bad override".into()))
        );
    }

    #[test]
    fn the_exit_code_is_kubectl_diffs() {
        assert_eq!(exit_code(&[Change::Unchanged, Change::Unchanged]), 0);
        assert_eq!(exit_code(&[]), 0);
        let create = Change::Create { after: json!({}) };
        assert_eq!(exit_code(&[Change::Unchanged, create.clone()]), 1);
        assert_eq!(exit_code(&[create, Change::Failed("x".into())]), 2);
    }

    #[test]
    fn the_summary_counts_each_kind_of_change() {
        let changes = BTreeMap::from([
            ("m1".to_string(), Change::Unchanged),
            ("m2".to_string(), Change::Delete { before: json!({}) }),
            ("m3".to_string(), Change::Failed("x".into())),
        ]);
        assert_eq!(
            summary(&changes),
            "3 cluster(s): 0 to create, 0 to update, 1 to delete, 1 unchanged, 1 failed"
        );
    }
}
