//! The agent's pure decisions: what to do with one manifest given the live member object,
//! which previously applied objects left the inventory (to prune), and the Work status to
//! report — carried over from the previous report where nothing changed, so an unchanged
//! cluster means no status write.

use flotilla_api::{
    ClusterReason, MANAGED_LABEL,
    drift::ClusterDrift,
    work::{
        AGENT_FIELD_MANAGER, APPLIED, AppliedResourceMeta, Condition, ManifestCondition, RELEASED,
        ResourceIdentifier, WorkStatus,
    },
};
use std::time::Duration;

use serde_json::Value;

use flotilla_core::member::{
    HASH_ANNOTATION, excluded_message, is_terminating, recorded_hash, up_to_date,
};

/// How soon a Work whose member cache has not shown the agent's own write is looked at
/// again (the write's own watch event requeues it sooner; the write stands in meanwhile:
/// [`super::own_writes`]).
pub const LAGGING_RECHECK: Duration = Duration::from_secs(10);

/// Whether the member object of `manifest` is in the agent's watch caches: only objects
/// labelled `kubefed.io/managed` are watched (as push mode's member caches), so a manifest
/// without the label is read live each time.
pub fn cacheable(manifest: &Value) -> bool {
    manifest
        .pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_LABEL.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        == Some("true")
}

/// The member object to decide on, and whether the cache lags: the cached object, unless
/// the agent's own write of `desired_hash` (any hash when `None`: pruning) still stands in
/// ([`super::own_writes`]; `written`: that hash and the object the member returned) and the
/// cache does not show that hash — absent, or another hash — then the written object.
/// An edit that keeps the hash annotation is seen at once (drift); only a lagging cache is
/// overruled, so an object created a moment ago is pruned, not taken for gone.
pub fn newest_view(
    cached: Option<Value>,
    written: Option<(&str, &Value)>,
    desired_hash: Option<&str>,
) -> (Option<Value>, bool) {
    match written {
        Some((hash, obj))
            if desired_hash.is_none_or(|want| want == hash)
                && cached.as_ref().and_then(recorded_hash) != Some(hash) =>
        {
            (Some(obj.clone()), true)
        }
        _ => (cached, false),
    }
}

/// What to do with one manifest.
#[derive(Clone, Debug, PartialEq)]
pub enum ManifestOp {
    /// The member object already is what the manifest says.
    Nothing,
    /// Apply the manifest (create, update, or repair drift).
    Apply,
    /// Leave the member object alone and report why.
    Refuse(ClusterReason, String),
}

/// Which existing member object a manifest may be written over (its config's
/// [`flotilla_api::work::ManifestConfig::adopt_label`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Adoption {
    /// Only an object labelled `<label>=true` (`None`: any object).
    pub label: Option<String>,
    /// The UID this Work's record holds for the manifest's object, when it holds one.
    pub applied_uid: Option<String>,
}

impl Adoption {
    /// Whether the rule restricts anything (an absent object must then be read live: the
    /// watch caches hold only labelled objects).
    pub fn restricted(&self) -> bool {
        self.label.is_some()
    }

    /// Why the existing member object `live` is not the manifest's to write, if it is not:
    /// it lacks the label and is not the object this Work applied.
    pub fn refusal(&self, live: &Value) -> Option<ManifestOp> {
        let label = self.label.as_deref()?;
        let labelled = (live.pointer("/metadata/labels"))
            .and_then(|l| l.get(label))
            .and_then(Value::as_str)
            == Some("true");
        let uid = live.pointer("/metadata/uid").and_then(Value::as_str);
        let ours = uid.is_some() && uid == self.applied_uid.as_deref();
        if labelled || ours {
            return None;
        }
        let text = |p: &str| live.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (kind, ns, name) = (
            text("/kind"),
            text("/metadata/namespace"),
            text("/metadata/name"),
        );
        let at = if ns.is_empty() {
            String::new()
        } else {
            format!(" in namespace {ns}")
        };
        Some(ManifestOp::Refuse(
            ClusterReason::AlreadyExists,
            format!(
                "{kind} {name}{at} exists in the member and is not labelled {label}=true: \
                 an object not made by Flotilla holds this name; left alone"
            ),
        ))
    }
}

/// Decides what to do with `manifest` given the live member object (`None`: absent),
/// once its [`Adoption`] rule let it write over that object.
pub fn decide(manifest: &Value, live: Option<&Value>) -> ManifestOp {
    let Some(live) = live else {
        return ManifestOp::Apply;
    };
    let label = live
        .pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_LABEL.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    if label == Some("false") {
        return ManifestOp::Refuse(ClusterReason::ManagedLabelFalse, excluded_message());
    }
    if is_terminating(live) {
        return ManifestOp::Refuse(
            ClusterReason::WaitingForRemoval,
            "the member object is being deleted; it is recreated once gone".into(),
        );
    }
    match manifest_hash(manifest) {
        Some(hash) if up_to_date(manifest, hash, live) => ManifestOp::Nothing,
        _ => ManifestOp::Apply,
    }
}

/// Why a manifest cannot be applied at all, checked before any request: it must be an
/// object with an `apiVersion` (`v1` or `group/version`), a `kind` and a `metadata.name`.
/// Without this a malformed manifest would reach discovery as an empty kind, or a group
/// would be guessed from an `apiVersion` such as `/v1`, and the reason shown would be a
/// discovery error instead of what is wrong with the manifest.
pub fn check_manifest(manifest: &Value) -> Result<(), String> {
    if !manifest.is_object() {
        return Err("the manifest is not a JSON object".into());
    }
    let text = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
    let api_version = text("/apiVersion");
    let parts: Vec<&str> = api_version.split('/').collect();
    if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "the manifest's apiVersion {api_version:?} is not of the form version or group/version"
        ));
    }
    if text("/kind").is_empty() {
        return Err("the manifest has no kind".into());
    }
    if text("/metadata/name").is_empty() {
        return Err("the manifest has no metadata.name".into());
    }
    Ok(())
}

/// The content hash the control plane recorded on a manifest.
pub fn manifest_hash(manifest: &Value) -> Option<&str> {
    manifest
        .pointer(&format!(
            "/metadata/annotations/{}",
            HASH_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)
}

/// Previously applied objects that are no longer in the inventory.
pub fn to_prune<'a>(
    previous: &'a [AppliedResourceMeta],
    current: &[ResourceIdentifier],
) -> Vec<&'a AppliedResourceMeta> {
    previous
        .iter()
        .filter(|p| !current.iter().any(|c| same_object(&p.identifier, c)))
        .collect()
}

/// Everything the agent knows it applied for a Work: its record, and what this process
/// applied but could not record (`unsaved`; newer, so it wins for the same object). A Work
/// removed before its record could be written still prunes what it applied.
pub fn known_applied(
    recorded: &[AppliedResourceMeta],
    unsaved: &[AppliedResourceMeta],
) -> Vec<AppliedResourceMeta> {
    let mut known = unsaved.to_vec();
    for r in recorded {
        if !unsaved
            .iter()
            .any(|u| same_object(&u.identifier, &r.identifier))
        {
            known.push(r.clone());
        }
    }
    known
}

/// The objects a Work's record named when it was created (`intended`) that no record of what
/// was applied lists: an agent may have applied them and stopped before recording them.
pub fn unrecorded<'a>(
    intended: &'a [ResourceIdentifier],
    applied: &[AppliedResourceMeta],
) -> Vec<&'a ResourceIdentifier> {
    intended
        .iter()
        .filter(|i| !applied.iter().any(|a| same_manifest(i, &a.identifier)))
        .collect()
}

/// The objects a Work's record must name as intended before a round applies the manifests
/// `current`: `None` when each is intended already or known applied (nothing to write);
/// else the current ones not known applied, and the intended ones still unresolved (not
/// current, never recorded: possibly applied by an earlier round, pruned later).
pub fn intent_update(
    intended: &[ResourceIdentifier],
    known: &[AppliedResourceMeta],
    current: &[ResourceIdentifier],
) -> Option<Vec<ResourceIdentifier>> {
    let in_list = |id: &ResourceIdentifier, list: &[ResourceIdentifier]| {
        list.iter().any(|i| same_manifest(i, id))
    };
    let is_known = |id: &ResourceIdentifier| known.iter().any(|k| same_manifest(&k.identifier, id));
    if current.iter().all(|c| in_list(c, intended) || is_known(c)) {
        return None;
    }
    let mut out: Vec<_> = current.iter().filter(|c| !is_known(c)).cloned().collect();
    out.extend(
        intended
            .iter()
            .filter(|i| !in_list(i, current) && !is_known(i))
            .cloned(),
    );
    Some(out)
}

/// Adds to `status` the Work condition [`RECORDED`] (`False`) when the agent could not write
/// the Work's AppliedWork this round (`failed`): what it applied is reported all the same,
/// and the record is retried. Absent otherwise.
pub fn with_record_failure(
    mut status: WorkStatus,
    previous: Option<&WorkStatus>,
    failed: Option<&str>,
    generation: Option<i64>,
    now: &str,
) -> WorkStatus {
    if let Some(message) = failed {
        let old = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == RECORDED));
        let mut c = condition(
            old,
            "False",
            "RecordFailed".into(),
            message.to_owned(),
            generation,
            now,
        );
        c.type_ = RECORDED.into();
        status.conditions.push(c);
    }
    status
}

/// Condition type on a Work: whether the agent could record what it applied in the Work's
/// AppliedWork (present only while it could not).
pub const RECORDED: &str = "Recorded";

/// Whether two identifiers name the same manifest object by kind (an identifier from a
/// manifest has no resource name before discovery).
pub fn same_manifest(a: &ResourceIdentifier, b: &ResourceIdentifier) -> bool {
    flotilla_api::work::same_object(a, b)
}

/// Whether a live object no record lists may be pruned: still Flotilla's, and written by the
/// agent (its field manager is among the writers the API server recorded). Without a
/// recorded UID this is what tells an object the agent applied from someone else's.
pub fn may_prune_unrecorded(live: &Value) -> bool {
    let label = live
        .pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_LABEL.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let by_agent = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|f| f.get("manager").and_then(Value::as_str) == Some(AGENT_FIELD_MANAGER));
    label == Some("true") && by_agent
}

/// Whether two identifiers name the same member object (the ordinal and the version do
/// not matter). An identifier of a manifest the member's discovery did not resolve this
/// round (the member unreachable, or the version not served) has no resource name: then
/// the kinds tell, and without a kind either the object is taken to be the one named —
/// a round that could not read a manifest never prunes what it still names (a fleet run
/// pruned, and applied again moments later, 28 objects whose discovery met a refused
/// connection just after their agent restarted; issue #54).
pub fn same_object(a: &ResourceIdentifier, b: &ResourceIdentifier) -> bool {
    let known = |x: &str, y: &str| !x.is_empty() && !y.is_empty();
    let same_type = if known(&a.resource, &b.resource) {
        a.resource == b.resource
    } else if known(&a.kind, &b.kind) {
        a.kind == b.kind
    } else {
        true
    };
    same_type && a.group == b.group && a.namespace == b.namespace && a.name == b.name
}

/// Whether two records of what was applied list the same objects, in any order: a round
/// whose manifest failed keeps its record last, which is no reason to write the record.
pub fn same_records(a: &[AppliedResourceMeta], b: &[AppliedResourceMeta]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
}

/// Whether a live object may be pruned: still Flotilla's, and the very object applied.
pub fn may_prune(recorded_uid: &str, live: &Value) -> bool {
    let label = live
        .pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_LABEL.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let uid = live.pointer("/metadata/uid").and_then(Value::as_str);
    label == Some("true") && (recorded_uid.is_empty() || uid == Some(recorded_uid))
}

/// The verdict on one manifest after this round.
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestResult {
    /// Which manifest and object.
    pub identifier: ResourceIdentifier,
    /// `Ok(())` applied (or already up to date); `Err((reason, message))` not applied.
    pub result: Result<(), (ClusterReason, String)>,
    /// Hash of the manifest applied.
    pub hash: Option<String>,
    /// The member object's generation, when known.
    pub generation: Option<i64>,
    /// The member object's status, when collected.
    pub status: Option<Value>,
    /// The last drift seen in the member object.
    pub drift: Option<ClusterDrift>,
    /// The member API server's reason when it refused (`Forbidden`, `Invalid`...).
    pub member_reason: Option<String>,
    /// The manifest was marked for orphaning and its object released (unlabelled, left in
    /// place, forgotten): reported as [`RELEASED`].
    pub released: bool,
}

/// The Work status for this round's results; conditions keep their transition time from
/// `previous` while their status stays.
pub fn work_status(
    previous: Option<&WorkStatus>,
    results: &[ManifestResult],
    generation: Option<i64>,
    now: &str,
) -> WorkStatus {
    let old_manifest = |id: &ResourceIdentifier| {
        previous
            .and_then(|p| {
                p.manifest_conditions
                    .iter()
                    .find(|m| same_manifest(&m.identifier, id))
            })
            .and_then(|m| m.conditions.iter().find(|c| c.type_ == APPLIED))
    };
    let manifest_conditions = results
        .iter()
        .map(|r| {
            let (status, reason, message) = match &r.result {
                Ok(()) if r.released => ("True", RELEASED.to_string(), String::new()),
                Ok(()) => ("True", "Applied".to_string(), String::new()),
                Err((reason, message)) => ("False", reason.as_str().to_string(), message.clone()),
            };
            ManifestCondition {
                identifier: r.identifier.clone(),
                conditions: vec![condition(
                    old_manifest(&r.identifier),
                    status,
                    reason,
                    message,
                    generation,
                    now,
                )],
                hash: r.hash.clone(),
                generation: r.generation,
                status_feedback: r.status.clone(),
                drift: r.drift.clone(),
            }
        })
        .collect();
    let failed = results.iter().filter(|r| r.result.is_err()).count();
    let (status, reason, message) = if failed == 0 {
        ("True", "AppliedManifestWorkComplete", String::new())
    } else {
        (
            "False",
            "AppliedManifestWorkFailed",
            format!("{failed} of {} manifests failed", results.len()),
        )
    };
    let old_work = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == APPLIED));
    WorkStatus {
        conditions: vec![condition(
            old_work,
            status,
            reason.into(),
            message,
            generation,
            now,
        )],
        manifest_conditions,
        drift_policy: None,
    }
}

pub(crate) fn condition(
    old: Option<&Condition>,
    status: &str,
    reason: String,
    message: String,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let last_transition_time = match old {
        Some(o) if o.status == status => o.last_transition_time.clone(),
        _ => now.to_owned(),
    };
    Condition {
        type_: APPLIED.into(),
        status: status.into(),
        observed_generation: generation,
        last_transition_time,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    fn cm(name: &str) -> ResourceIdentifier {
        ResourceIdentifier {
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "d".into(),
            name: name.into(),
            ..ResourceIdentifier::default()
        }
    }

    fn names(ids: &[ResourceIdentifier]) -> Vec<&str> {
        ids.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn a_new_manifest_is_named_as_intended_before_it_is_applied() {
        let applied = |n: &str| AppliedResourceMeta {
            identifier: ResourceIdentifier {
                resource: "configmaps".into(),
                ..cm(n)
            },
            ..AppliedResourceMeta::default()
        };
        // Every manifest intended or recorded: nothing to write (a steady state).
        assert_eq!(
            intent_update(&[cm("a")], &[applied("b")], &[cm("a"), cm("b")]),
            None
        );
        // "c" is new: named with what is not recorded yet; "x", intended earlier, never
        // recorded and no longer a manifest, stays named until pruned; "old" (recorded) is
        // left to the record.
        let update = intent_update(
            &[cm("a"), cm("x"), cm("old")],
            &[applied("b"), applied("old")],
            &[cm("a"), cm("b"), cm("c")],
        );
        assert_eq!(update.as_deref().map(names), Some(vec!["a", "c", "x"]));
    }

    #[test]
    fn a_record_failure_is_a_work_condition_only_while_it_lasts() {
        let base = WorkStatus::default();
        let failed = with_record_failure(base.clone(), None, Some("forbidden"), Some(2), "t0");
        let c = failed
            .conditions
            .iter()
            .find(|c| c.type_ == RECORDED)
            .expect("a Recorded condition");
        assert_eq!(
            (c.status.as_str(), c.message.as_str()),
            ("False", "forbidden")
        );
        let again = with_record_failure(
            base.clone(),
            Some(&failed),
            Some("forbidden"),
            Some(2),
            "t1",
        );
        assert_eq!(again, failed, "unchanged: no status write");
        assert_eq!(
            with_record_failure(base.clone(), Some(&failed), None, Some(2), "t1"),
            base
        );
    }

    use super::*;

    fn with_hash(hash: &str, data: &str) -> Value {
        serde_json::json!({
            "metadata": {"name": "a", "annotations": {HASH_ANNOTATION: hash}},
            "data": {"k": data},
        })
    }

    #[test]
    fn only_managed_manifests_are_read_from_the_caches() {
        let labelled = serde_json::json!({"metadata": {"labels": {MANAGED_LABEL: "true"}}});
        assert!(cacheable(&labelled));
        assert!(!cacheable(&serde_json::json!({"metadata": {"name": "a"}})));
        let off = serde_json::json!({"metadata": {"labels": {MANAGED_LABEL: "false"}}});
        assert!(!cacheable(&off));
    }

    #[test]
    fn the_agents_own_write_overrules_a_cache_that_has_not_shown_it() {
        let ours = with_hash("h2", "new");
        // Absent from the cache, or cached with the previous hash: the cache lags.
        assert_eq!(
            newest_view(None, Some(("h2", &ours)), Some("h2")),
            (Some(ours.clone()), true)
        );
        let old = with_hash("h1", "old");
        assert_eq!(
            newest_view(Some(old.clone()), Some(("h2", &ours)), Some("h2")),
            (Some(ours.clone()), true)
        );
        // The cache shows our hash: it is the truth, drifted fields included.
        let drifted = with_hash("h2", "edited");
        assert_eq!(
            newest_view(Some(drifted.clone()), Some(("h2", &ours)), Some("h2")),
            (Some(drifted), false)
        );
        // A write of another hash than the one wanted now, or none: the cache decides.
        assert_eq!(
            newest_view(Some(old.clone()), Some(("h2", &ours)), Some("h3")),
            (Some(old.clone()), false)
        );
        assert_eq!(newest_view(None, None, Some("h2")), (None, false));
        // Pruning asks for any hash: an object written a moment ago is not taken for gone.
        assert_eq!(
            newest_view(None, Some(("h2", &ours)), None),
            (Some(ours.clone()), true)
        );
    }
    use serde_json::json;

    fn manifest() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a", "labels": {MANAGED_LABEL: "true"}, "annotations": {HASH_ANNOTATION: "h1"}},
               "data": {"k": "v"}})
    }

    fn live(data: Value, managed: &str) -> Value {
        json!({"metadata": {"name": "a", "uid": "u1", "labels": {MANAGED_LABEL: managed}, "annotations": {HASH_ANNOTATION: "h1"}},
               "data": data})
    }

    fn decide_any(manifest: &Value, live: Option<&Value>) -> ManifestOp {
        super::decide(manifest, live)
    }

    /// What the agent does: the adoption rule first, then [`decide`].
    fn decide(manifest: &Value, live: Option<&Value>, rule: &Adoption) -> ManifestOp {
        live.and_then(|l| rule.refusal(l))
            .unwrap_or_else(|| super::decide(manifest, live))
    }

    #[test]
    fn an_object_without_the_adoption_label_is_left_alone_unless_this_work_applied_it() {
        let rule = Adoption {
            label: Some("flotilla.io/dependency".into()),
            applied_uid: None,
        };
        let users = json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "uid": "u1"},
                           "data": {"k": "mine"}});
        let ManifestOp::Refuse(reason, message) = decide(&manifest(), Some(&users), &rule) else {
            panic!("a user's object is refused");
        };
        assert_eq!(reason, ClusterReason::AlreadyExists);
        assert!(message.contains("ConfigMap a in namespace d"), "{message}");
        // Absent: created. Labelled: Flotilla's copy, written as usual.
        assert_eq!(decide(&manifest(), None, &rule), ManifestOp::Apply);
        let mut copy = users.clone();
        copy["metadata"]["labels"] = json!({"flotilla.io/dependency": "true"});
        assert_eq!(decide(&manifest(), Some(&copy), &rule), ManifestOp::Apply);
        // The very object this Work applied (its recorded UID) stays ours, label or not; a
        // new object of that name (another UID) does not.
        let ours = Adoption {
            applied_uid: Some("u1".into()),
            ..rule.clone()
        };
        assert_eq!(decide(&manifest(), Some(&users), &ours), ManifestOp::Apply);
        let other = Adoption {
            applied_uid: Some("u0".into()),
            ..rule
        };
        assert!(matches!(
            decide(&manifest(), Some(&users), &other),
            ManifestOp::Refuse(ClusterReason::AlreadyExists, _)
        ));
        // No rule (federated types' manifests): taken over, as before.
        assert_eq!(decide_any(&manifest(), Some(&users)), ManifestOp::Apply);
        assert!(!Adoption::default().restricted());
    }

    #[test]
    fn an_absent_object_is_applied_and_an_up_to_date_one_left_alone() {
        assert_eq!(decide_any(&manifest(), None), ManifestOp::Apply);
        assert_eq!(
            decide_any(&manifest(), Some(&live(json!({"k": "v"}), "true"))),
            ManifestOp::Nothing
        );
    }

    #[test]
    fn a_member_side_edit_is_drift_and_is_applied_again() {
        assert_eq!(
            decide_any(&manifest(), Some(&live(json!({"k": "edited"}), "true"))),
            ManifestOp::Apply
        );
    }

    #[test]
    fn an_object_labelled_managed_false_is_refused() {
        assert!(matches!(
            decide_any(&manifest(), Some(&live(json!({"k": "v"}), "false"))),
            ManifestOp::Refuse(ClusterReason::ManagedLabelFalse, _)
        ));
    }

    #[test]
    fn only_objects_that_left_the_inventory_are_pruned_and_only_if_still_ours() {
        let id = |name: &str| ResourceIdentifier {
            resource: "configmaps".into(),
            namespace: "demo".into(),
            name: name.into(),
            ..Default::default()
        };
        let previous = vec![
            AppliedResourceMeta {
                identifier: id("a"),
                uid: "u1".into(),
            },
            AppliedResourceMeta {
                identifier: id("b"),
                uid: "u2".into(),
            },
        ];
        let pruned = to_prune(&previous, &[id("a")]);
        assert_eq!(pruned.len(), 1);
        assert_eq!(pruned[0].identifier.name, "b");
        assert!(may_prune("u1", &live(json!({}), "true")));
        assert!(!may_prune("u9", &live(json!({}), "true")));
        assert!(!may_prune("u1", &live(json!({}), "false")));
    }

    #[test]
    fn a_manifest_discovery_did_not_resolve_prunes_nothing_it_names() {
        let recorded = vec![applied("a", "u1"), applied("b", "u2")];
        // `b`'s discovery failed this round: its identifier has a kind, no resource name.
        let unresolved = |kind: &str, name: &str| ResourceIdentifier {
            kind: kind.into(),
            namespace: "demo".into(),
            name: name.into(),
            ..Default::default()
        };
        let a = recorded[0].identifier.clone();
        assert!(to_prune(&recorded, &[a.clone(), unresolved("ConfigMap", "b")]).is_empty());
        // A malformed manifest without a kind is taken for the object it names.
        assert!(to_prune(&recorded, &[a.clone(), unresolved("", "b")]).is_empty());
        // Another kind of the same name is another object.
        let pruned = to_prune(&recorded, &[a, unresolved("Secret", "b")]);
        assert_eq!(pruned.len(), 1);
        assert_eq!(pruned[0].identifier.name, "b");
    }

    #[test]
    fn records_listing_the_same_objects_in_another_order_are_the_same() {
        let (a, b) = (applied("a", "u1"), applied("b", "u2"));
        assert!(same_records(
            &[a.clone(), b.clone()],
            &[b.clone(), a.clone()]
        ));
        assert!(!same_records(
            &[a.clone(), b.clone()],
            std::slice::from_ref(&a)
        ));
        assert!(!same_records(&[a.clone(), b], &[a, applied("b", "u9")]));
    }

    fn applied(name: &str, uid: &str) -> AppliedResourceMeta {
        AppliedResourceMeta {
            identifier: ResourceIdentifier {
                kind: "ConfigMap".into(),
                resource: "configmaps".into(),
                namespace: "demo".into(),
                name: name.into(),
                ..Default::default()
            },
            uid: uid.into(),
        }
    }

    #[test]
    fn what_could_not_be_recorded_is_pruned_with_what_was() {
        let recorded = vec![applied("a", "u1"), applied("b", "u2")];
        // `b` applied again (a new UID) and `c` applied, neither recorded yet.
        let unsaved = vec![applied("b", "u3"), applied("c", "u4")];
        let known = known_applied(&recorded, &unsaved);
        let uids: Vec<_> = known.iter().map(|k| k.uid.as_str()).collect();
        assert_eq!(uids, ["u3", "u4", "u1"]);
        // Nothing unsaved: the record alone.
        assert_eq!(known_applied(&recorded, &[]), recorded);
        // A manifest dropped from the Work before `c` was recorded: `c` is pruned.
        let current = [recorded[0].identifier.clone()];
        let pruned: Vec<_> = to_prune(&known, &current)
            .iter()
            .map(|p| p.identifier.name.as_str())
            .collect();
        assert_eq!(pruned, ["b", "c"]);
    }

    #[test]
    fn objects_named_at_creation_but_never_recorded_are_looked_at() {
        let manifest_id = |name: &str| ResourceIdentifier {
            kind: "ConfigMap".into(),
            version: "v1".into(),
            namespace: "demo".into(),
            name: name.into(),
            ..Default::default()
        };
        let intended = vec![manifest_id("a"), manifest_id("b")];
        // `a` recorded (with its resource name): only `b` is unaccounted for.
        let left = unrecorded(&intended, &[applied("a", "u1")]);
        assert_eq!(left, [&intended[1]]);
        assert!(unrecorded(&intended, &[applied("a", "u1"), applied("b", "u2")]).is_empty());
        let secret = ResourceIdentifier {
            kind: "Secret".into(),
            ..manifest_id("a")
        };
        assert_eq!(
            unrecorded(std::slice::from_ref(&secret), &[applied("a", "u1")]).len(),
            1
        );
    }

    #[test]
    fn an_unrecorded_object_is_pruned_only_if_the_agent_wrote_it_and_it_is_still_managed() {
        let with = |managed: &str, manager: &str| {
            json!({"metadata": {"name": "a", "labels": {MANAGED_LABEL: managed},
                   "managedFields": [{"manager": "kubectl"}, {"manager": manager}]}})
        };
        assert!(may_prune_unrecorded(&with("true", AGENT_FIELD_MANAGER)));
        assert!(!may_prune_unrecorded(&with("true", "someone-else")));
        assert!(!may_prune_unrecorded(&with("false", AGENT_FIELD_MANAGER)));
        assert!(!may_prune_unrecorded(&json!({"metadata": {"name": "a"}})));
    }

    #[test]
    fn an_unchanged_round_reports_an_identical_status() {
        let results = vec![ManifestResult {
            identifier: ResourceIdentifier::default(),
            result: Ok(()),
            hash: Some("h1".into()),
            generation: Some(1),
            status: None,
            drift: None,
            member_reason: None,
            released: false,
        }];
        let first = work_status(None, &results, Some(2), "t0");
        let second = work_status(Some(&first), &results, Some(2), "t1");
        assert_eq!(first, second);
        let failed = vec![ManifestResult {
            result: Err((ClusterReason::CreationFailed, "denied".into())),
            ..results[0].clone()
        }];
        let third = work_status(Some(&second), &failed, Some(2), "t2");
        assert_eq!(
            third.manifest_conditions[0].conditions[0].reason,
            "CreationFailed"
        );
        assert_eq!(third.manifest_conditions[0].conditions[0].message, "denied");
        assert_eq!(third.conditions[0].last_transition_time, "t2");
    }
}
