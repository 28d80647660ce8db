//! Drift in a Pull member, decided as push mode decides it: the same
//! [`flotilla_core::drift`] functions on the agent's watch cache. The cache keeps a digest
//! of each object's `managedFields` (other writers only) so a drift names who changed
//! what; the federated object's policy arrives as annotations on the Work
//! ([`POLICY_ANNOTATION`](flotilla_core::drift::POLICY_ANNOTATION),
//! [`IGNORE_ANNOTATION`](flotilla_core::drift::IGNORE_ANNOTATION)); the verdict — repair,
//! report, or stop a fight — and the bounded, redacted entry for the manifest's `drift`
//! field in the Work status are made here. The host copies that entry into the federated
//! object's `status.drift` and announces it. This module makes no request.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
};

use flotilla_api::drift::{ClusterDrift, DriftState};
use flotilla_core::{
    drift::{
        DIGEST_ANNOTATION, IGNORE_ANNOTATION, Mode, POLICY_ANNOTATION, Policy,
        decide::{self, Finding, Input, Verdict},
        digest,
        fight::{History, Repair},
    },
    member::recorded_hash,
};
use kube::core::DynamicObject;
use serde_json::Value;

use super::{cache::ObjectId, plan::ManifestOp, plan::manifest_hash};

/// Member objects whose repair history is kept before expired ones are swept.
const SWEEP_AT: usize = 4096;

/// The cache's cut for a member object: see [`digest::keep_in_annotation`].
pub fn keep_digest(obj: &mut DynamicObject) {
    digest::keep_in_annotation(obj);
}

/// The drift policy a Work carries; one that cannot be read is the default (`Repair` of
/// every field), as on the host, which announces the error on the federated object.
pub fn work_policy(annotations: &BTreeMap<String, String>) -> Policy {
    Policy::from_annotations(annotations).unwrap_or_default()
}

/// The drift mode the agent applies to a Work, for the Work status's `driftPolicy` (the
/// acknowledgement that the agent holds it): `Report` or `Repair` (also when only fields
/// are ignored, and for a policy that cannot be read, which is repaired as the default).
/// None without drift annotations: the default policy.
pub fn applied_policy(annotations: &BTreeMap<String, String>) -> Option<String> {
    if !annotations.contains_key(POLICY_ANNOTATION) && !annotations.contains_key(IGNORE_ANNOTATION)
    {
        return None;
    }
    let name = match work_policy(annotations).mode {
        Mode::Report => "Report",
        Mode::Repair => "Repair",
    };
    Some(name.to_string())
}

/// What the drift decision of one manifest reads besides the member object.
pub struct Context<'a> {
    /// The member cluster's name (the entry's `cluster`).
    pub cluster: &'a str,
    /// The Work's drift policy.
    pub policy: &'a Policy,
    /// The manifest's previous `drift` entry in the Work status.
    pub previous: Option<&'a ClusterDrift>,
    /// Whether the object is a Secret (values redacted).
    pub secret: bool,
}

/// What to do with a manifest once drift is considered, and the drift found.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// The operation.
    pub op: ManifestOp,
    /// The drift, when the member object drifted.
    pub finding: Option<Finding>,
}

/// The pure decision: `op` as [`super::plan::decide`] made it, turned by drift. Only an
/// `Apply` of a member object that already carries the manifest's hash is drift (another
/// hash is a template change): the same fields, writers, policy and fight rules as push.
/// `awaiting`: the cache still shows the version the agent's last repair was written over.
pub fn judge(
    op: ManifestOp,
    manifest: &Value,
    live: Option<&Value>,
    awaiting: bool,
    history: &History,
    cx: &Context<'_>,
    now: i64,
) -> Judgement {
    let unchanged = |op| Judgement { op, finding: None };
    let Some(live) = live else {
        return unchanged(op);
    };
    if op != ManifestOp::Apply || recorded_hash(live).is_none() {
        return unchanged(op);
    }
    if recorded_hash(live) != manifest_hash(manifest) {
        return unchanged(op);
    }
    if awaiting {
        return unchanged(ManifestOp::Nothing);
    }
    let digest = digest::decode(
        live.pointer(&annotation_pointer(DIGEST_ANNOTATION))
            .and_then(Value::as_str),
    );
    let verdict = decide::decide(&Input {
        desired: manifest,
        live,
        digest: &digest,
        policy: cx.policy,
        retained: &[],
        history,
        previous: cx.previous,
        now,
    });
    match verdict {
        Verdict::None => unchanged(ManifestOp::Apply),
        Verdict::Ignored => unchanged(ManifestOp::Nothing),
        Verdict::Drift(f) => Judgement {
            op: if f.state == DriftState::Repaired {
                ManifestOp::Apply
            } else {
                ManifestOp::Nothing
            },
            finding: Some(f),
        },
    }
}

/// The manifest's `drift` entry after this round: the new entry for a drift found now
/// (a repair that failed is `Detected`); without one, the record of the last repair stays
/// and a report or fight that resolved itself goes (as [`flotilla_core::drift::merge`]
/// does per cluster).
pub fn entry(
    finding: Option<&Finding>,
    repaired: bool,
    cx: &Context<'_>,
    now: &str,
) -> Option<ClusterDrift> {
    match finding {
        Some(f) => Some(decide::entry(
            cx.cluster,
            f,
            repaired,
            cx.secret,
            cx.previous,
            now,
        )),
        None => cx
            .previous
            .filter(|p| DriftState::parse(&p.state) == Some(DriftState::Repaired))
            .cloned(),
    }
}

/// What the agent remembers about drift between rounds: each member object's recent
/// repairs (for fights) and the version each repair was written over, until the cache
/// moves past it (so a round that overtakes the member watch does not repair twice).
#[derive(Default)]
pub struct Memory {
    repairs: Mutex<HashMap<ObjectId, History>>,
    repaired_over: Mutex<HashMap<ObjectId, String>>,
}

impl Memory {
    /// The object's recent repairs.
    pub fn history(&self, id: &ObjectId) -> History {
        let repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        repairs.get(id).cloned().unwrap_or_default()
    }

    /// Whether the cache still shows `version`, the one the last repair was written over;
    /// a version it moved past is forgotten.
    pub fn awaits_repair(&self, id: &ObjectId, version: Option<&str>) -> bool {
        let mut over = self.repaired_over.lock().unwrap_or_else(|e| e.into_inner());
        match (over.get(id), version) {
            (Some(v), Some(live)) if v == live => true,
            (Some(_), _) => {
                over.remove(id);
                false
            }
            (None, _) => false,
        }
    }

    /// Records a repair written over `version` at `now` (Unix seconds).
    pub fn repaired(&self, id: &ObjectId, finding: &Finding, version: Option<&str>, now: i64) {
        if let Some(v) = version {
            let mut over = self.repaired_over.lock().unwrap_or_else(|e| e.into_inner());
            over.insert(id.clone(), v.to_string());
        }
        let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        if repairs.len() > SWEEP_AT {
            repairs.retain(|_, h| !h.expired(now));
        }
        repairs.entry(id.clone()).or_default().record(Repair {
            at: now,
            manager: finding.writer().to_string(),
            pointers: finding.pointers().into_iter().map(String::from).collect(),
        });
    }

    /// Forgets a pruned object.
    pub fn forget(&self, id: &ObjectId) {
        self.repairs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.repaired_over
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

fn annotation_pointer(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

#[cfg(test)]
mod tests {
    use flotilla_api::MANAGED_LABEL;
    use flotilla_api::work::AGENT_FIELD_MANAGER;
    use flotilla_core::member::HASH_ANNOTATION;
    use kube::ResourceExt;
    use serde_json::json;

    use super::*;

    fn manifest() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "demo",
                            "labels": {MANAGED_LABEL: "true"},
                            "annotations": {HASH_ANNOTATION: "h1"}},
               "spec": {"replicas": 2}})
    }

    /// The member object after `manager` set `replicas`, as the cache keeps it.
    fn live(hash: &str, replicas: i64, manager: &str) -> Value {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "resourceVersion": "7",
                "labels": {MANAGED_LABEL: "true"}, "annotations": {HASH_ANNOTATION: hash},
                "managedFields": [
                    {"manager": AGENT_FIELD_MANAGER, "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": manager, "operation": "Update", "time": "2026-01-01T00:01:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": replicas}}))
        .expect("object");
        keep_digest(&mut obj);
        obj.metadata.managed_fields = None;
        serde_json::to_value(obj).expect("json")
    }

    fn cx<'a>(policy: &'a Policy, previous: Option<&'a ClusterDrift>) -> Context<'a> {
        Context {
            cluster: "member2",
            policy,
            previous,
            secret: false,
        }
    }

    #[test]
    fn a_scale_in_the_member_is_repaired_and_names_the_field_and_writer() {
        let policy = Policy::default();
        let live = live("h1", 5, "kubectl-scale");
        let j = judge(
            ManifestOp::Apply,
            &manifest(),
            Some(&live),
            false,
            &History::default(),
            &cx(&policy, None),
            100,
        );
        assert_eq!(j.op, ManifestOp::Apply);
        let f = j.finding.expect("drift");
        assert_eq!(f.state, DriftState::Repaired);
        let e = entry(Some(&f), true, &cx(&policy, None), "T").expect("entry");
        assert_eq!(e.cluster, "member2");
        assert_eq!(e.fields[0].path, "spec.replicas");
        assert_eq!(
            (e.fields[0].desired.as_str(), e.fields[0].live.as_str()),
            ("2", "5")
        );
        assert_eq!(e.managers[0].manager, "kubectl-scale");
        assert_eq!(e.repaired_at.as_deref(), Some("T"));
    }

    #[test]
    fn report_leaves_the_change_and_keeps_its_detection_time() {
        let policy = Policy {
            mode: Mode::Report,
            ignore: vec![],
        };
        let live = live("h1", 4, "kubectl-scale");
        let judged = |previous| {
            judge(
                ManifestOp::Apply,
                &manifest(),
                Some(&live),
                false,
                &History::default(),
                &cx(&policy, previous),
                100,
            )
        };
        let j = judged(None);
        assert_eq!(j.op, ManifestOp::Nothing);
        let first = entry(j.finding.as_ref(), false, &cx(&policy, None), "T1").expect("entry");
        assert_eq!(first.state, "Detected");
        let again = judged(Some(&first));
        let second = entry(
            again.finding.as_ref(),
            false,
            &cx(&policy, Some(&first)),
            "T2",
        );
        assert_eq!(
            second.as_ref(),
            Some(&first),
            "an unchanged drift rewrites nothing"
        );
        // Resolved: the report goes; a repair's record stays.
        assert_eq!(entry(None, false, &cx(&policy, Some(&first)), "T3"), None);
        let repaired = ClusterDrift {
            state: "Repaired".into(),
            ..first
        };
        assert_eq!(
            entry(None, false, &cx(&policy, Some(&repaired)), "T3"),
            Some(repaired.clone())
        );
    }

    #[test]
    fn an_ignored_field_is_left_alone_and_a_template_change_is_no_drift() {
        let policy = work_policy(&BTreeMap::from([
            (POLICY_ANNOTATION.to_string(), "Ignore".to_string()),
            (IGNORE_ANNOTATION.to_string(), "spec.replicas".to_string()),
        ]));
        let history = History::default();
        let live = live("h1", 6, "autoscaler");
        let j = judge(
            ManifestOp::Apply,
            &manifest(),
            Some(&live),
            false,
            &history,
            &cx(&policy, None),
            1,
        );
        assert_eq!(
            j,
            Judgement {
                op: ManifestOp::Nothing,
                finding: None
            }
        );
        let old = super::tests::live("h0", 6, "autoscaler");
        let j = judge(
            ManifestOp::Apply,
            &manifest(),
            Some(&old),
            false,
            &history,
            &cx(&policy, None),
            1,
        );
        assert_eq!(
            j,
            Judgement {
                op: ManifestOp::Apply,
                finding: None
            }
        );
    }

    #[test]
    fn a_writer_that_keeps_undoing_repairs_is_a_fight_and_a_pending_repair_is_not_sent_twice() {
        let policy = Policy::default();
        let memory = Memory::default();
        let id: ObjectId = (
            "apps".into(),
            "deployments".into(),
            "demo".into(),
            "web".into(),
        );
        let live = live("h1", 7, "autoscaler");
        let mut states = Vec::new();
        for round in 0..5 {
            let j = judge(
                ManifestOp::Apply,
                &manifest(),
                Some(&live),
                false,
                &memory.history(&id),
                &cx(&policy, None),
                100 + round,
            );
            let f = j.finding.expect("drift");
            states.push(f.state);
            if f.state == DriftState::Repaired {
                memory.repaired(&id, &f, Some("7"), 100 + round);
            }
        }
        assert_eq!(states[..4], [DriftState::Repaired; 4]);
        assert_eq!(states[4], DriftState::Fight);
        // The cache still shows the version repaired over: nothing is sent again.
        assert!(memory.awaits_repair(&id, Some("7")));
        let j = judge(
            ManifestOp::Apply,
            &manifest(),
            Some(&live),
            true,
            &History::default(),
            &cx(&policy, None),
            1,
        );
        assert_eq!(j.op, ManifestOp::Nothing);
        assert!(!memory.awaits_repair(&id, Some("8")));
        assert!(
            !memory.awaits_repair(&id, Some("7")),
            "forgotten once moved past"
        );
    }

    #[test]
    fn a_forged_digest_is_dropped_and_a_secret_is_redacted() {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {DIGEST_ANNOTATION: "[{\"m\":\"forged\"}]"}}}))
        .expect("object");
        keep_digest(&mut obj);
        assert_eq!(obj.annotations().get(DIGEST_ANNOTATION), None);
        let f = Finding {
            state: DriftState::Repaired,
            differences: flotilla_core::drift::diff::differences(
                &json!({"data": {"k": "c2VjcmV0"}}),
                &json!({"data": {"k": "b3RoZXI="}}),
            ),
            managers: vec![],
        };
        let policy = Policy::default();
        let mut c = cx(&policy, None);
        c.secret = true;
        let e = entry(Some(&f), true, &c, "T").expect("entry");
        let text = serde_json::to_string(&e).expect("json");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("b3RoZXI="),
            "{text}"
        );
    }

    #[test]
    fn the_applied_policy_names_the_mode_and_an_unreadable_one_is_repair() {
        let of = |pairs: &[(&str, &str)]| {
            applied_policy(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert_eq!(of(&[]), None);
        assert_eq!(of(&[("other", "x")]), None);
        assert_eq!(
            of(&[(POLICY_ANNOTATION, "Report")]).as_deref(),
            Some("Report")
        );
        assert_eq!(
            of(&[(POLICY_ANNOTATION, "Repair")]).as_deref(),
            Some("Repair")
        );
        let ignore = [
            (POLICY_ANNOTATION, "Ignore"),
            (IGNORE_ANNOTATION, "spec.replicas"),
        ];
        assert_eq!(of(&ignore).as_deref(), Some("Repair"));
        assert_eq!(
            of(&[(IGNORE_ANNOTATION, "/spec/replicas")]).as_deref(),
            Some("Repair")
        );
        // Unreadable: repaired as the default, and said so.
        assert_eq!(
            of(&[(POLICY_ANNOTATION, "Sometimes")]).as_deref(),
            Some("Repair")
        );
        assert_eq!(
            of(&[(POLICY_ANNOTATION, "Ignore")]).as_deref(),
            Some("Repair")
        );
    }
}
