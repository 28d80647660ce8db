//! The auto-mount decision, without I/O: from a Pod and its annotation naming
//! ServiceAccountImports, the JSON patch that mounts each import's Secret read-only at
//! `/var/run/secrets/flotilla.io/serviceaccountimports/<name>/` in every container, or the
//! message rejecting the Pod; and the AdmissionReview answer carrying either.
//!
//! Two [`Convention`]s share this: Flotilla's annotation and mount root, and Admiralty's
//! (`multicluster.admiralty.io/service-account-import.name`, mounted under
//! `/var/run/secrets/admiralty.io/serviceaccountimports/`).

use std::collections::BTreeMap;

use base64::Engine as _;
use flotilla_api::{
    admiralty::{ADMIRALTY_IMPORTS_ANNOTATION, ADMIRALTY_MOUNT_ROOT, ImportGroup},
    hash::content_hash,
};
use serde_json::{Value, json};

/// Pod annotation naming the imports to mount, comma-separated.
pub const IMPORTS_ANNOTATION: &str = "multicluster.flotilla.io/service-account-import.name";
/// Where each import's Secret is mounted; `<name>/` is appended.
pub const MOUNT_ROOT: &str = "/var/run/secrets/flotilla.io/serviceaccountimports";

/// The import names an annotation value lists, trimmed, in order, without duplicates.
pub fn import_names(annotation: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for n in annotation
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    names
}

/// One auto-mount convention: which annotation names the imports, which groups they are
/// looked up in (in order), where and under which volume names they are mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Convention {
    /// The Pod annotation listing import names.
    pub annotation: &'static str,
    /// The groups whose imports the names may be, first match wins.
    pub groups: &'static [ImportGroup],
    /// Where each Secret is mounted; `/<name>/` is appended.
    pub mount_root: &'static str,
    /// Prefix of the volume names, distinct per convention so both can apply to one Pod.
    pub volume_prefix: &'static str,
}

/// Flotilla's convention: Flotilla's imports only.
pub const FLOTILLA: Convention = Convention {
    annotation: IMPORTS_ANNOTATION,
    groups: &[ImportGroup::Flotilla],
    mount_root: MOUNT_ROOT,
    volume_prefix: "sai-",
};

/// Admiralty's convention: Admiralty's imports, else Flotilla's of that name.
pub const ADMIRALTY: Convention = Convention {
    annotation: ADMIRALTY_IMPORTS_ANNOTATION,
    groups: &[ImportGroup::Admiralty, ImportGroup::Flotilla],
    mount_root: ADMIRALTY_MOUNT_ROOT,
    volume_prefix: "msa-",
};

/// The conventions, in the order their patches are applied.
pub const CONVENTIONS: [Convention; 2] = [FLOTILLA, ADMIRALTY];

/// The volume name of an import under Flotilla's convention (see [`volume_name_with`]).
pub fn volume_name(import: &str) -> String {
    volume_name_with(FLOTILLA.volume_prefix, import)
}

/// The volume name of an import: `<prefix><name>` when that is a valid DNS label, else
/// the prefix and a hash of the name (import names may be longer and hold dots).
pub fn volume_name_with(prefix: &str, import: &str) -> String {
    let name = format!("{prefix}{import}");
    let label = name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if label {
        name
    } else {
        format!("{prefix}{}", &content_hash(&json!(import))[..16])
    }
}

/// The JSON patch mounting each import's Secret (`secrets`: import name → Secret name; an
/// import missing from it is unknown) into every container and init container. Volumes the
/// Pod already has are left alone, so a re-invoked webhook adds nothing twice.
pub fn mount_patch(
    pod: &Value,
    namespace: &str,
    names: &[String],
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<Value>, String> {
    mount_patch_with(&FLOTILLA, pod, namespace, names, secrets)
}

/// [`mount_patch`] under `convention`.
pub fn mount_patch_with(
    convention: &Convention,
    pod: &Value,
    namespace: &str,
    names: &[String],
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<Value>, String> {
    let unknown: Vec<&str> = names
        .iter()
        .filter(|n| !secrets.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "annotation {} names ServiceAccountImport(s) {} that do not exist in namespace {namespace}",
            convention.annotation,
            unknown.join(", ")
        ));
    }
    let spec = &pod["spec"];
    let has_volume = |v: &str| {
        spec["volumes"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|x| x["name"] == v))
    };
    let mut ops = Vec::new();
    if !spec["volumes"].is_array() && !names.is_empty() {
        ops.push(json!({"op": "add", "path": "/spec/volumes", "value": []}));
    }
    let mut mounts = Vec::new();
    for name in names {
        let volume = volume_name_with(convention.volume_prefix, name);
        if has_volume(&volume) {
            continue;
        }
        ops.push(json!({"op": "add", "path": "/spec/volumes/-",
            "value": {"name": volume, "secret": {"secretName": secrets[name]}}}));
        mounts.push(
            json!({"name": volume, "mountPath": format!("{}/{name}/", convention.mount_root), "readOnly": true}),
        );
    }
    if mounts.is_empty() {
        return Ok(ops);
    }
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec[list].as_array() else {
            continue;
        };
        for (i, c) in containers.iter().enumerate() {
            if !c["volumeMounts"].is_array() {
                ops.push(json!({"op": "add", "path": format!("/spec/{list}/{i}/volumeMounts"), "value": []}));
            }
            for m in &mounts {
                ops.push(json!({"op": "add", "path": format!("/spec/{list}/{i}/volumeMounts/-"), "value": m}));
            }
        }
    }
    Ok(ops)
}

/// `pod` with `ops` applied, so the next convention's patch builds on it (a second
/// `add /spec/volumes []` would drop the first one's volumes).
pub fn applied(pod: &Value, ops: &[Value]) -> Result<Value, String> {
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec()))
        .map_err(|e| format!("internal: a malformed patch: {e}"))?;
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch)
        .map_err(|e| format!("internal: the patch does not apply: {e}"))?;
    Ok(out)
}

/// The AdmissionReview (admission.k8s.io/v1) answering request `uid`: allowed with the
/// patch (none when empty), or denied with the message.
pub fn review_response(uid: &str, result: &Result<Vec<Value>, String>) -> Value {
    let response = match result {
        Ok(ops) if ops.is_empty() => json!({"uid": uid, "allowed": true}),
        Ok(ops) => json!({
            "uid": uid,
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(Value::Array(ops.clone()).to_string()),
        }),
        Err(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"spec": {
            "initContainers": [{"name": "init", "image": "x"}],
            "containers": [
                {"name": "a", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "b", "image": "x"}
            ],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }})
    }

    fn secrets() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("m1".to_string(), "m1-kubeconfig".to_string()),
            ("m2".to_string(), "m2-kubeconfig".to_string()),
        ])
    }

    fn patched(pod: &Value, names: &[&str]) -> Value {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let ops = mount_patch(pod, "foo", &names, &secrets()).expect("known imports");
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("a patch");
        let mut out = pod.clone();
        json_patch::patch(&mut out, &patch).expect("applies");
        out
    }

    #[test]
    fn annotation_names_are_trimmed_and_deduplicated() {
        assert_eq!(import_names(" a, b,,a ,c"), vec!["a", "b", "c"]);
        assert!(import_names(" , ").is_empty());
    }

    #[test]
    fn each_import_is_mounted_read_only_in_every_container() {
        let out = patched(&pod(), &["m1", "m2"]);
        let volumes = out["spec"]["volumes"].as_array().expect("volumes");
        assert_eq!(volumes.len(), 3);
        assert_eq!(
            volumes[1],
            json!({"name": "sai-m1", "secret": {"secretName": "m1-kubeconfig"}})
        );
        for list in ["initContainers", "containers"] {
            for c in out["spec"][list].as_array().expect("containers") {
                let mounts = c["volumeMounts"].as_array().expect("mounts");
                let m1 = mounts
                    .iter()
                    .find(|m| m["name"] == "sai-m1")
                    .expect("m1 mounted");
                assert_eq!(m1["mountPath"], format!("{MOUNT_ROOT}/m1/"));
                assert_eq!(m1["readOnly"], true);
                assert!(mounts.iter().any(|m| m["name"] == "sai-m2"));
            }
        }
        let a = &out["spec"]["containers"][0]["volumeMounts"];
        assert_eq!(a[0]["name"], "data", "existing mounts are kept");
    }

    #[test]
    fn a_pod_without_volumes_gets_the_list_and_a_second_pass_adds_nothing() {
        let bare = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        let once = patched(&bare, &["m1"]);
        assert_eq!(once["spec"]["volumes"].as_array().map(Vec::len), Some(1));
        let again = mount_patch(&once, "foo", &["m1".to_string()], &secrets()).expect("ok");
        assert!(again.is_empty());
    }

    #[test]
    fn an_unknown_import_rejects_the_pod_naming_it() {
        let err = mount_patch(&pod(), "foo", &["m1".into(), "nope".into()], &secrets())
            .expect_err("unknown import");
        assert!(err.contains("nope") && err.contains("foo") && !err.contains("m1,"));
        let review = review_response("u1", &Err(err));
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["uid"], "u1");
    }

    #[test]
    fn the_review_carries_the_patch_as_base64_json_patch() {
        let ops = vec![json!({"op": "add", "path": "/x", "value": 1})];
        let review = review_response("u2", &Ok(ops.clone()));
        let r = &review["response"];
        assert_eq!(
            (r["allowed"].as_bool(), r["patchType"].as_str()),
            (Some(true), Some("JSONPatch"))
        );
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().expect("patch"))
            .expect("base64");
        assert_eq!(
            serde_json::from_slice::<Value>(&decoded).expect("json"),
            Value::Array(ops)
        );
        assert!(
            review_response("u3", &Ok(vec![]))["response"]
                .get("patch")
                .is_none()
        );
    }

    #[test]
    fn long_or_dotted_import_names_get_a_hashed_volume_name() {
        assert_eq!(volume_name("reader"), "sai-reader");
        let dotted = volume_name("a.b");
        assert!(dotted.starts_with("sai-") && dotted.len() == 20 && !dotted.contains('.'));
        assert!(volume_name(&"x".repeat(80)).len() <= 63);
    }

    #[test]
    fn admiraltys_convention_mounts_under_its_root_and_names_its_annotation() {
        let names = vec!["m1".to_string()];
        let ops = mount_patch_with(&ADMIRALTY, &pod(), "foo", &names, &secrets()).expect("known");
        let out = applied(&pod(), &ops).expect("applies");
        let volumes = out["spec"]["volumes"].as_array().expect("volumes");
        assert!(
            volumes.contains(&json!({"name": "msa-m1", "secret": {"secretName": "m1-kubeconfig"}}))
        );
        let mounts = out["spec"]["containers"][1]["volumeMounts"]
            .as_array()
            .expect("mounts");
        assert_eq!(
            mounts[0]["mountPath"],
            json!("/var/run/secrets/admiralty.io/serviceaccountimports/m1/")
        );
        let err = mount_patch_with(&ADMIRALTY, &pod(), "foo", &["nope".into()], &secrets())
            .expect_err("unknown");
        assert!(
            err.contains("multicluster.admiralty.io/service-account-import.name"),
            "{err}"
        );
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn both_conventions_on_one_pod_keep_each_others_volumes() {
        let bare = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        let names = vec!["m1".to_string()];
        let first = mount_patch_with(&FLOTILLA, &bare, "foo", &names, &secrets()).expect("known");
        let after = applied(&bare, &first).expect("applies");
        let second =
            mount_patch_with(&ADMIRALTY, &after, "foo", &names, &secrets()).expect("known");
        let out = applied(&after, &second).expect("applies");
        let volumes: Vec<&str> = out["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(volumes, ["sai-m1", "msa-m1"]);
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        // Re-invoked (a namespace with both labels): nothing is added twice.
        let again = mount_patch_with(&ADMIRALTY, &out, "foo", &names, &secrets()).expect("known");
        assert!(again.is_empty(), "{again:?}");
    }
}
