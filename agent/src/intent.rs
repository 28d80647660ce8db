//! The compact form of an AppliedWork's [`APPLYING_ANNOTATION`]: the objects its Work is
//! about to apply, grouped by apiVersion, kind and namespace, each group naming its
//! objects by name only. A bundle's manifests share one kind and namespace, so each
//! object costs its name and three bytes, while its entry in the bundle holds that name
//! at least twice (the manifest and its config) besides a fixed part: a bundle within
//! the largest split limit ([`BUNDLE_MAX_BYTES_CEILING`], twice [`ANNOTATIONS_MAX_BYTES`]) always has an
//! intent within Kubernetes' bound on an object's annotations, which a list of full
//! identifiers was not (the tests show the worst cases). An annotation of the older form
//! (a JSON list of identifiers) is still read. Pure.
//!
//! [`BUNDLE_MAX_BYTES_CEILING`]: flotilla_api::work::BUNDLE_MAX_BYTES_CEILING

#[cfg(doc)]
use flotilla_api::work::APPLYING_ANNOTATION;
use flotilla_api::work::ResourceIdentifier;
use serde_json::{Value, json};

/// Kubernetes' bound on all of an object's annotations together, keys and values.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// One group of the annotation: objects of one apiVersion, kind and namespace.
struct Group<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    namespace: &'a str,
    names: Vec<&'a str>,
}

/// The annotation's value naming `ids`, in their order within each group (groups in the
/// order of their first object).
pub fn encode(ids: &[ResourceIdentifier]) -> String {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for id in ids {
        let same = |g: &&mut Group<'_>| {
            g.group == id.group
                && g.version == id.version
                && g.kind == id.kind
                && g.namespace == id.namespace
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.names.push(&id.name),
            None => groups.push(Group {
                group: &id.group,
                version: &id.version,
                kind: &id.kind,
                namespace: &id.namespace,
                names: vec![&id.name],
            }),
        }
    }
    let objects: Vec<Value> = groups
        .iter()
        .map(|g| {
            let api_version = if g.group.is_empty() {
                g.version.to_owned()
            } else {
                format!("{}/{}", g.group, g.version)
            };
            let mut o = json!({"apiVersion": api_version, "kind": g.kind, "names": g.names});
            if !g.namespace.is_empty() {
                o["namespace"] = json!(g.namespace);
            }
            o
        })
        .collect();
    json!({ "objects": objects }).to_string()
}

/// The objects an annotation's value names (ordinals 0, no resource names: as a manifest's
/// identifier before discovery); none when unreadable. Reads the older form too.
pub fn decode(text: &str) -> Vec<ResourceIdentifier> {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    if value.is_array() {
        return serde_json::from_value(value).unwrap_or_default();
    }
    let text_of =
        |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut out = Vec::new();
    for g in value
        .get("objects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let api_version = text_of(g, "apiVersion");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version),
        };
        let (kind, namespace) = (text_of(g, "kind"), text_of(g, "namespace"));
        for name in g
            .get("names")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            out.push(ResourceIdentifier {
                group: group.clone(),
                version: version.clone(),
                kind: kind.clone(),
                namespace: namespace.clone(),
                name: name.to_owned(),
                ..ResourceIdentifier::default()
            });
        }
    }
    out
}

/// What one round may name in the annotation (`intent`, written with `key`) and apply:
/// every `unresolved` object (named earlier, possibly applied, never recorded: never
/// dropped) and as many `new` ones, in order, as keep the annotation within
/// [`ANNOTATIONS_MAX_BYTES`]; `deferred`, the rest, wait for a later round (once the ones
/// applied now are recorded, they no longer need naming). One bundle's objects always fit
/// (the tests show it); only a bundle whose objects all changed while the previous ones
/// are still unresolved can defer some.
pub fn within_bound(
    key: &str,
    unresolved: &[ResourceIdentifier],
    new: &[ResourceIdentifier],
) -> (Vec<ResourceIdentifier>, Vec<ResourceIdentifier>) {
    let naming = |k: usize| -> Vec<ResourceIdentifier> {
        new[..k].iter().chain(unresolved).cloned().collect()
    };
    let fits = |k: usize| key.len() + encode(&naming(k)).len() <= ANNOTATIONS_MAX_BYTES;
    // The size grows with each object named: the most that fit, by bisection.
    let (mut low, mut high) = (0, new.len());
    if !fits(high) {
        while low < high {
            let mid = (low + high).div_ceil(2);
            if fits(mid) { low = mid } else { high = mid - 1 }
        }
    }
    (naming(high), new[high..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::work::{
        APPLYING_ANNOTATION, BUNDLE_MAX_BYTES_CEILING, ManifestConfig, identify, same_object,
    };

    /// The smallest manifest of an object named `name` the control plane could bundle: a
    /// kind of one letter in the core group, nothing but its name (and namespace).
    fn smallest(name: &str, namespace: Option<&str>) -> Value {
        let mut m = json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": name}});
        if let Some(ns) = namespace {
            m["metadata"]["namespace"] = json!(ns);
        }
        m
    }

    /// Bytes of a bundle entry, as the control plane's split rule counts them
    /// (`controllers/src/sync/bundles.rs`, `entry_size`): the manifest's JSON and its
    /// config's. The config names the federated object, of the member object's name.
    fn entry_size(manifest: &Value, namespace: Option<&str>, name: &str) -> usize {
        let config = ManifestConfig {
            identifier: identify(0, manifest),
            source_namespace: namespace.map(str::to_owned),
            source_name: name.to_owned(),
            ..ManifestConfig::default()
        };
        let config = serde_json::to_vec(&config).map_or(0, |v| v.len());
        manifest.to_string().len() + config
    }

    /// The identifiers of the most manifests with names of `len` characters (at least as
    /// many as tell them apart) one bundle within the split limit holds.
    fn fullest_bundle(len: usize, namespace: Option<&str>) -> Vec<ResourceIdentifier> {
        let mut ids = Vec::new();
        let mut total = 0;
        for i in 0.. {
            let name = format!("{i:0len$}");
            let manifest = smallest(&name, namespace);
            total += entry_size(&manifest, namespace, &name);
            if total > BUNDLE_MAX_BYTES_CEILING {
                break;
            }
            ids.push(identify(i, &manifest));
        }
        ids
    }

    #[test]
    fn the_intent_of_the_fullest_bundle_fits_an_objects_annotations() {
        for namespace in [Some("n"), None] {
            for len in [1, 4, 8, 16, 32, 63, 128, 253] {
                let ids = fullest_bundle(len, namespace);
                let compact = APPLYING_ANNOTATION.len() + encode(&ids).len();
                assert!(
                    compact <= ANNOTATIONS_MAX_BYTES,
                    "{} names of {len}: {compact} bytes",
                    ids.len()
                );
                let back = decode(&encode(&ids));
                assert_eq!(back.len(), ids.len());
                assert!(ids.iter().zip(&back).all(|(a, b)| same_object(a, b)));
            }
        }
        // What the AppliedWork's status records of the same objects (with their resource
        // names and UIDs) stays well within an object's bound too.
        for len in [4, 253] {
            let ids = fullest_bundle(len, Some("n"));
            let status: Vec<_> = ids
                .iter()
                .map(|i| flotilla_api::work::AppliedResourceMeta {
                    identifier: ResourceIdentifier {
                        resource: "as".into(),
                        ..i.clone()
                    },
                    uid: "6feebc0a-5667-4e14-b4a6-48dcd705a205".into(),
                })
                .collect();
            let bytes = serde_json::to_string(&status).map_or(0, |s| s.len());
            assert!(bytes < 1024 * 1024, "{} objects: {bytes} bytes", ids.len());
        }
        // The worst case: the most objects a bundle can hold, names of four digits.
        let most = fullest_bundle(1, Some("n"));
        let full_identifiers = serde_json::to_string(&most).map_or(0, |s| s.len());
        let compact = encode(&most).len();
        assert!(most.len() > 2_500, "{} objects", most.len());
        assert!(
            compact * 6 < full_identifiers,
            "{} objects: {compact} bytes, {full_identifiers} as full identifiers",
            most.len()
        );
    }

    #[test]
    fn a_bundle_that_changed_while_its_old_objects_are_unresolved_defers_what_does_not_fit() {
        let old = fullest_bundle(253, Some("n"));
        let renamed = |id: &ResourceIdentifier| ResourceIdentifier {
            name: id.name.replacen('0', "1", 1),
            ..id.clone()
        };
        let new: Vec<_> = old.iter().map(renamed).collect();
        // One bundle's worth alone: everything is named at once.
        let (intent, deferred) = within_bound(APPLYING_ANNOTATION, &[], &new);
        assert_eq!((intent.len(), deferred.len()), (new.len(), 0));
        // Two: the old ones stay named, the new ones that do not fit wait, in order.
        let (intent, deferred) = within_bound(APPLYING_ANNOTATION, &old, &new);
        let size = APPLYING_ANNOTATION.len() + encode(&intent).len();
        assert!(size <= ANNOTATIONS_MAX_BYTES, "{size}");
        assert!(old.iter().all(|o| intent.contains(o)));
        let named = intent.len() - old.len();
        assert!(named > 0 && !deferred.is_empty(), "{named} named");
        assert_eq!(deferred, new[named..]);
        assert_eq!(intent[..named], new[..named]);
        // One more would not have fitted.
        let mut more = intent.clone();
        more.push(deferred[0].clone());
        assert!(APPLYING_ANNOTATION.len() + encode(&more).len() > ANNOTATIONS_MAX_BYTES);
    }

    #[test]
    fn objects_of_several_kinds_and_namespaces_come_back_as_they_were() {
        let id = |api_version: &str, kind: &str, ns: &str, name: &str| {
            identify(
                3,
                &json!({"apiVersion": api_version, "kind": kind,
                        "metadata": {"name": name, "namespace": ns}}),
            )
        };
        let ids = vec![
            id("v1", "ConfigMap", "a", "x"),
            id("apps/v1", "Deployment", "a", "web"),
            id("v1", "ConfigMap", "b", "x"),
            id("v1", "ConfigMap", "a", "y"),
            id("v1", "Namespace", "", "a"),
        ];
        let text = encode(&ids);
        assert_eq!(
            text,
            r#"{"objects":[{"apiVersion":"v1","kind":"ConfigMap","names":["x","y"],"namespace":"a"},{"apiVersion":"apps/v1","kind":"Deployment","names":["web"],"namespace":"a"},{"apiVersion":"v1","kind":"ConfigMap","names":["x"],"namespace":"b"},{"apiVersion":"v1","kind":"Namespace","names":["a"]}]}"#
        );
        let back = decode(&text);
        let names: Vec<_> = back
            .iter()
            .map(|b| format!("{}/{}/{}/{}", b.group, b.kind, b.namespace, b.name))
            .collect();
        assert_eq!(
            names,
            [
                "/ConfigMap/a/x",
                "/ConfigMap/a/y",
                "apps/Deployment/a/web",
                "/ConfigMap/b/x",
                "/Namespace//a"
            ]
        );
        assert!(back.iter().all(|b| b.ordinal == 0 && b.resource.is_empty()));
        assert!(decode(&encode(&[])).is_empty());
    }

    #[test]
    fn an_annotation_of_the_older_form_is_read_and_one_unreadable_names_nothing() {
        let ids = vec![identify(
            0,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}}),
        )];
        let older = serde_json::to_string(&ids).expect("identifiers serialize");
        assert_eq!(decode(&older), ids);
        assert!(decode("not json").is_empty());
        assert!(decode(r#"{"other": 1}"#).is_empty());
    }
}
