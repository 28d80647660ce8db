//! Member-object conventions: what Flotilla writes on the objects it creates in member
//! clusters and how it reads them back. The control plane and the pull agent both use these,
//! so a member object written by either looks the same to the other.

use serde_json::Value;

use flotilla_api::MANAGED_LABEL;

/// Annotation on member objects holding the content hash of what Flotilla last applied.
pub const HASH_ANNOTATION: &str = "flotilla.io/desired-hash";

/// Namespaces that are never deleted in a member, whatever a FederatedNamespace says.
pub const PROTECTED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "default"];

/// Why an object labelled `managed=false` in a member is not written.
pub fn excluded_message() -> String {
    format!("the member object is labelled {MANAGED_LABEL}=false; Flotilla leaves it alone")
}

/// Whether a member object carries a deletion timestamp.
pub fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Whether the member object already is what Flotilla would apply: the recorded hash
/// matches (so nothing was removed from the template) and every desired field still has
/// its desired value (so nobody edited an owned field in the member).
pub fn up_to_date(desired: &Value, hash: &str, actual: &Value) -> bool {
    recorded_hash(actual) == Some(hash) && fields_match(desired, actual, TYPE_META)
}

/// Top-level fields not compared. A member object that arrived in a LIST (a watch's initial
/// list, after every restart) carries no `apiVersion` and `kind` — the API server omits them
/// on list items — while one from a watch event has both. They are fixed by the API the
/// object is read from: comparing them made every object listed at start-up look drifted,
/// and a restart re-applied every member object once.
const TYPE_META: &[&str] = &["apiVersion", "kind"];

/// Whether every field of `want` is present in `have` with an equal value. Objects may
/// have extra keys (defaults, fields set by the member); lists may have extra trailing
/// items (items other managers own, such as injected sidecars).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    fields_match(want, have, &[])
}

/// [`is_subset`], with the top-level fields in `skip` left out.
fn fields_match(want: &Value, have: &Value, skip: &[&str]) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .all(|(k, wv)| {
                h.get(k).is_some_and(|hv| is_subset(wv, hv)) || (wv.is_null() && !h.contains_key(k))
            }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() <= h.len() && w.iter().zip(h.iter()).all(|(wv, hv)| is_subset(wv, hv))
        }
        (Value::Number(w), Value::Number(h)) => w.as_f64() == h.as_f64(),
        (w, h) => w == h,
    }
}

/// The content hash Flotilla recorded on a member object, if any.
pub fn recorded_hash(obj: &Value) -> Option<&str> {
    obj.pointer(&format!(
        "/metadata/annotations/{}",
        HASH_ANNOTATION.replace('/', "~1")
    ))
    .and_then(Value::as_str)
}

/// Annotation on the agent's Lease: the member's Kubernetes version (`gitVersion`), so the
/// host can fill in `status.kubernetesVersion` without calling the member.
pub const VERSION_ANNOTATION: &str = "flotilla.io/kubernetes-version";

/// Label on a Work being deleted whose member object is to be kept, only unlabelled
/// (`kubefed.io/orphan`, protected namespaces): the agent reads it from the deleted Work.
pub const ORPHAN_LABEL: &str = "work.flotilla.io/orphan";
