//! The `flotilla.io/unreachable:NoExecute` taint: put on a KubeFedCluster while its health
//! check does not say Ready and taken off when it does, as Kubernetes' node controller
//! does for nodes. [`next_taints`] decides; [`sync_taint`] writes `spec.taints` only when
//! that changes it. Which objects move, and when, is the scheduler's business.

use flotilla_api::{
    FIELD_MANAGER, KubeFedCluster,
    taint::{Taint, TaintEffect, UNREACHABLE_TAINT_KEY},
};
use flotilla_core::taint::rfc3339;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use tracing::{info, warn};

/// The taints a cluster should have given its readiness: `None` when `current` is right.
/// An existing unreachable taint keeps its `timeAdded`, so tolerations count from when the
/// cluster first went unready.
pub fn next_taints(current: &[Taint], ready: bool, now: i64) -> Option<Vec<Taint>> {
    let has = current
        .iter()
        .any(|t| t.key == UNREACHABLE_TAINT_KEY && t.effect == TaintEffect::NoExecute);
    match (ready, has) {
        (true, true) => Some(
            current
                .iter()
                .filter(|t| t.key != UNREACHABLE_TAINT_KEY)
                .cloned()
                .collect(),
        ),
        (false, false) => {
            let mut next = current.to_vec();
            next.push(Taint {
                key: UNREACHABLE_TAINT_KEY.to_string(),
                value: None,
                effect: TaintEffect::NoExecute,
                time_added: Some(rfc3339(now)),
            });
            Some(next)
        }
        _ => None,
    }
}

/// Adds or removes the unreachable taint of cluster `name` when its readiness calls for it.
/// `current` is the spec's taints as the registry last saw them; a failed write is retried
/// on the next health round.
pub async fn sync_taint(api: &Api<KubeFedCluster>, name: &str, current: &[Taint], ready: bool) {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let Some(next) = next_taints(current, ready, now) else {
        return;
    };
    // A merge patch replaces the whole list; the JSON null clears it when it is empty.
    let patch = serde_json::json!({ "spec": { "taints": if next.is_empty() { serde_json::Value::Null } else { serde_json::to_value(&next).unwrap_or_default() } } });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(&patch)).await {
        Ok(_) if ready => info!(cluster = %name, "removed the {UNREACHABLE_TAINT_KEY} taint"),
        Ok(_) => info!(cluster = %name, "added the {UNREACHABLE_TAINT_KEY} taint"),
        Err(e) => warn!(cluster = %name, error = %e, "updating the cluster's taints failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain() -> Taint {
        Taint {
            key: "drain".into(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }
    }

    #[test]
    fn an_unready_cluster_gets_the_taint_once_with_the_time_it_went_unready() {
        let next = next_taints(&[drain()], false, 100).expect("added");
        assert_eq!(next.len(), 2);
        assert_eq!(next[0], drain());
        assert_eq!(next[1].key, UNREACHABLE_TAINT_KEY);
        assert_eq!(next[1].time_added.as_deref(), Some(rfc3339(100).as_str()));
        assert_eq!(next_taints(&next, false, 200), None, "kept as it is");
    }

    #[test]
    fn a_ready_cluster_loses_only_the_unreachable_taint() {
        let tainted = next_taints(&[drain()], false, 100).expect("added");
        assert_eq!(next_taints(&tainted, true, 200), Some(vec![drain()]));
        assert_eq!(next_taints(&[drain()], true, 200), None);
    }
}
