//! The Events the control plane published on the benchmark's federated objects, counted by
//! reason: a phase whose host requests exceed the floor says why (each Warning comes with a
//! status write that reported a failure, and usually a second one when it cleared).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use kube::{Api, Client, api::ListParams};
use tracing::warn;

use super::FED_NS;

/// Occurrences so far, by reason, and the newest message of each reason.
#[derive(Debug, Clone, Default)]
pub(super) struct HostEvents {
    pub(super) by_reason: BTreeMap<String, u64>,
    pub(super) newest: BTreeMap<String, String>,
}

impl HostEvents {
    /// The Events in the benchmark's namespace now, read from the host apiserver's watch
    /// cache (no etcd read while the members load the shared etcd); `None`, with a warning,
    /// when the host does not answer: a phase's figures do not depend on them.
    pub(super) async fn take(host: &Client) -> Option<HostEvents> {
        let api: Api<Event> = Api::namespaced(host.clone(), FED_NS);
        match api.list(&ListParams::default().match_any()).await {
            Ok(list) => Some(Self::of(&list.items)),
            Err(e) => {
                warn!(error = %e, "reading the host's Events failed; this phase reports none");
                None
            }
        }
    }

    fn of(events: &[Event]) -> HostEvents {
        let mut out = HostEvents::default();
        let mut newest_at = BTreeMap::new();
        for e in events {
            let reason = e.reason.clone().unwrap_or_default();
            *out.by_reason.entry(reason.clone()).or_insert(0) += occurrences(e);
            let at = (e.metadata.resource_version.as_deref())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if newest_at.get(&reason).is_none_or(|seen| *seen < at) {
                newest_at.insert(reason.clone(), at);
                out.newest
                    .insert(reason, e.message.clone().unwrap_or_default());
            }
        }
        out
    }

    /// The occurrences between two readings, by reason (reasons with none left out; none
    /// when either reading failed).
    pub(super) fn between(
        before: Option<&HostEvents>,
        after: Option<&HostEvents>,
    ) -> BTreeMap<String, u64> {
        match (before, after) {
            (Some(before), Some(after)) => after.since(before),
            _ => BTreeMap::new(),
        }
    }

    /// The occurrences since `before`, by reason (reasons with none left out).
    fn since(&self, before: &HostEvents) -> BTreeMap<String, u64> {
        self.by_reason
            .iter()
            .map(|(r, n)| {
                (
                    r.clone(),
                    n.saturating_sub(*before.by_reason.get(r).unwrap_or(&0)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// How many times one Event object happened: its series' count, else its `count`, else 1.
fn occurrences(e: &Event) -> u64 {
    let series = e.series.as_ref().and_then(|s| s.count);
    series.or(e.count).map_or(1, |n| n.max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(reason: &str, rv: &str, extra: serde_json::Value) -> Event {
        let mut v = json!({
            "metadata": {"name": format!("e{rv}"), "resourceVersion": rv},
            "involvedObject": {},
            "reason": reason,
            "message": format!("message {rv}"),
        });
        v.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        serde_json::from_value(v).expect("event")
    }

    #[test]
    fn occurrences_are_summed_by_reason_and_counted_since_an_earlier_reading() {
        let before = HostEvents::of(&[event("CreationFailed", "5", json!({"count": 2}))]);
        let after = HostEvents::of(&[
            event("CreationFailed", "5", json!({"count": 3})),
            event(
                "CreationFailed",
                "9",
                json!({"series": {"count": 4, "lastObservedTime": "2026-11-27T00:00:00.000000Z"}}),
            ),
            event("ClusterNotReady", "7", json!({})),
        ]);
        assert_eq!(after.by_reason["CreationFailed"], 7);
        assert_eq!(after.newest["CreationFailed"], "message 9");
        let since = after.since(&before);
        assert_eq!(since.get("CreationFailed"), Some(&5));
        assert_eq!(since.get("ClusterNotReady"), Some(&1));
        assert_eq!(HostEvents::of(&[]).since(&before), BTreeMap::new());
    }
}
