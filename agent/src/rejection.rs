//! What the member's API server said when it refused a manifest, carried to the host: the
//! Status reason (`Forbidden`, `Invalid`, `Conflict`, `NotFound`...) names a `Rejected`
//! condition on the manifest and on the Work, next to the `Applied` condition (whose reason
//! stays the per-cluster outcome the host's status reads, such as `CreationFailed`), and
//! the reason of a failure's Event and metric. Pure decisions; the Events are sent by
//! [`super::observe`].

use flotilla_api::work::{APPLIED, ManifestCondition, ResourceIdentifier, WorkStatus};

use super::plan::{ManifestResult, condition};

/// Type of the condition naming the member's reason for refusing.
pub const REJECTED: &str = "Rejected";

/// The member's reason in an API error: the Status reason, or the one its code stands for.
pub fn member_reason(e: &kube::Error) -> Option<String> {
    let kube::Error::Api(s) = e else {
        return None;
    };
    if !s.reason.is_empty() {
        return Some(s.reason.clone());
    }
    let by_code = match s.code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Gone",
        422 => "Invalid",
        429 => "TooManyRequests",
        500..=599 => "InternalError",
        _ => return None,
    };
    Some(by_code.to_owned())
}

/// The reason a failed manifest is counted and announced under: the member's, else the
/// agent's own.
pub fn failure_reason(r: &ManifestResult) -> Option<String> {
    match &r.result {
        Ok(()) => None,
        Err((reason, _)) => Some(
            r.member_reason
                .clone()
                .unwrap_or_else(|| reason.as_str().to_owned()),
        ),
    }
}

/// `kind namespace/name` (or `kind name`) of a manifest, for messages.
pub fn describe(id: &ResourceIdentifier) -> String {
    match id.namespace.as_str() {
        "" => format!("{} {}", id.kind, id.name),
        ns => format!("{} {ns}/{}", id.kind, id.name),
    }
}

/// Adds the `Rejected` conditions to `status` (built by [`super::plan::work_status`]): one
/// per manifest the member refused, and one on the Work naming the first refusal (absent
/// when nothing was refused). Transition times carry over from `previous`.
pub fn with_rejections(
    mut status: WorkStatus,
    previous: Option<&WorkStatus>,
    results: &[ManifestResult],
    generation: Option<i64>,
    now: &str,
) -> WorkStatus {
    let old_of = |conditions: &[flotilla_api::work::Condition]| {
        conditions.iter().find(|c| c.type_ == REJECTED).cloned()
    };
    let mut refused = Vec::new();
    for (m, r) in status.manifest_conditions.iter_mut().zip(results) {
        let (Err((_, message)), Some(reason)) = (&r.result, &r.member_reason) else {
            continue;
        };
        let old = previous.and_then(|p| old_manifest(p, &m.identifier));
        let mut c = condition(
            old.and_then(|o| old_of(&o.conditions)).as_ref(),
            "True",
            reason.clone(),
            message.clone(),
            generation,
            now,
        );
        c.type_ = REJECTED.into();
        m.conditions.push(c);
        refused.push((reason.clone(), describe(&r.identifier), message.clone()));
    }
    if let Some((reason, first, message)) = refused.first() {
        let note = format!(
            "{} of {} manifests refused by the member; {first}: {message}",
            refused.len(),
            results.len()
        );
        let old = previous.and_then(|p| old_of(&p.conditions));
        let mut c = condition(old.as_ref(), "True", reason.clone(), note, generation, now);
        c.type_ = REJECTED.into();
        status.conditions.push(c);
    }
    status
}

fn old_manifest<'a>(p: &'a WorkStatus, id: &ResourceIdentifier) -> Option<&'a ManifestCondition> {
    p.manifest_conditions.iter().find(|m| &m.identifier == id)
}

/// The failed manifests of this round that were not failing for the same reason and
/// message in `previous`: each deserves an Event (a failure that persists does not repeat).
pub fn new_failures<'a>(
    previous: Option<&WorkStatus>,
    results: &'a [ManifestResult],
) -> Vec<(&'a ManifestResult, String)> {
    results
        .iter()
        .filter_map(|r| {
            let reason = failure_reason(r)?;
            let Err((applied_reason, message)) = &r.result else {
                return None;
            };
            let before = previous
                .and_then(|p| old_manifest(p, &r.identifier))
                .and_then(|m| m.conditions.iter().find(|c| c.type_ == APPLIED));
            let same = before.is_some_and(|c| {
                c.status == "False" && c.reason == applied_reason.as_str() && &c.message == message
            });
            (!same).then_some((r, reason))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use flotilla_api::ClusterReason;
    use kube::core::Status;

    use super::*;
    use crate::plan::work_status;

    fn result(name: &str, failure: Option<(&str, &str)>) -> ManifestResult {
        ManifestResult {
            identifier: ResourceIdentifier {
                kind: "ConfigMap".into(),
                namespace: "demo".into(),
                name: name.into(),
                ..ResourceIdentifier::default()
            },
            result: match failure {
                None => Ok(()),
                Some((_, msg)) => Err((ClusterReason::CreationFailed, msg.into())),
            },
            hash: None,
            generation: None,
            status: None,
            drift: None,
            member_reason: failure.map(|(reason, _)| reason.to_owned()),
            released: false,
        }
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("no", reason).with_code(code).boxed())
    }

    #[test]
    fn the_member_reason_comes_from_the_status_or_its_code() {
        assert_eq!(
            member_reason(&api_error(422, "Invalid")).as_deref(),
            Some("Invalid")
        );
        assert_eq!(
            member_reason(&api_error(403, "")).as_deref(),
            Some("Forbidden")
        );
        assert_eq!(member_reason(&api_error(418, "")), None);
    }

    #[test]
    fn refused_manifests_get_a_rejected_condition_with_the_member_reason() {
        let results = [
            result("ok", None),
            result("bad", Some(("Invalid", "data: too long"))),
        ];
        let base = work_status(None, &results, Some(3), "t0");
        let status = with_rejections(base, None, &results, Some(3), "t0");
        let work = status.conditions.iter().find(|c| c.type_ == REJECTED);
        let work = work.expect("a Work-level Rejected condition");
        assert_eq!(work.reason, "Invalid");
        assert!(
            work.message.contains("1 of 2 manifests"),
            "{}",
            work.message
        );
        assert!(
            work.message.contains("ConfigMap demo/bad"),
            "{}",
            work.message
        );
        let bad = &status.manifest_conditions[1].conditions;
        assert!(
            bad.iter()
                .any(|c| c.type_ == REJECTED && c.reason == "Invalid")
        );
        let applied = bad.iter().find(|c| c.type_ == APPLIED).expect("Applied");
        assert_eq!(applied.reason, "CreationFailed", "the host's outcome stays");
        assert!(
            status.manifest_conditions[0]
                .conditions
                .iter()
                .all(|c| c.type_ != REJECTED)
        );
        let again = with_rejections(
            work_status(Some(&status), &results, Some(3), "t1"),
            Some(&status),
            &results,
            Some(3),
            "t1",
        );
        assert_eq!(again, status, "an unchanged round reports the same status");
    }

    #[test]
    fn nothing_refused_means_no_rejected_condition() {
        let results = [result("ok", None)];
        let status = with_rejections(
            work_status(None, &results, Some(1), "t0"),
            None,
            &results,
            Some(1),
            "t0",
        );
        assert!(status.conditions.iter().all(|c| c.type_ != REJECTED));
    }

    #[test]
    fn only_a_new_or_changed_failure_is_announced() {
        let results = [result("bad", Some(("Forbidden", "denied")))];
        let fresh = new_failures(None, &results);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].1, "Forbidden");
        let status = work_status(None, &results, Some(1), "t0");
        assert!(new_failures(Some(&status), &results).is_empty());
        let changed = [result("bad", Some(("Forbidden", "denied again")))];
        assert_eq!(new_failures(Some(&status), &changed).len(), 1);
    }
}
