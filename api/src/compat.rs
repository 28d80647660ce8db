//! CRD compatibility: whether a newly generated CustomResourceDefinition still accepts and
//! serves everything the previous one did, so stored objects and users' manifests keep
//! working after an upgrade. Pure: CRDs in (as JSON values), a list of breaking changes out.
//! Reading the snapshot and the generated CRDs is `bin/crdcompat.rs`'s job.
//!
//! A change is breaking when it drops a field (the API server would prune it from stored
//! objects), narrows a type, removes an enum value (or introduces an enum), makes a field
//! newly required, tightens a validation keyword (bounds, `pattern`, `format`), removes a
//! version or stops serving it, changes the scope or the names, or moves the storage
//! version without a conversion path. Descriptions, printer columns,
//! new optional fields and new versions are compatible.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// What kind of breaking change was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BreakKind {
    /// A CRD of the previous set is no longer generated.
    CrdRemoved,
    /// The scope (Namespaced/Cluster) changed.
    ScopeChanged,
    /// The kind or the plural name changed.
    NamesChanged,
    /// A version of the previous CRD is gone.
    VersionRemoved,
    /// A version that was served is no longer served.
    VersionNotServed,
    /// The storage version moved without a conversion path.
    StorageVersionChanged,
    /// A field is no longer in the schema (and its parent does not keep unknown fields).
    FieldRemoved,
    /// A field's type is narrower (another type, integer from number, typed from free-form).
    TypeNarrowed,
    /// Unknown fields were kept and are now pruned.
    UnknownFieldsPruned,
    /// An enum value was removed, or an enum now restricts a field that had none.
    EnumNarrowed,
    /// A field is newly required.
    NewlyRequired,
    /// A validation keyword is new or stricter (`maxLength` lower, `pattern` changed, ...).
    ValidationTightened,
}

impl BreakKind {
    /// A short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakKind::CrdRemoved => "CRD removed",
            BreakKind::ScopeChanged => "scope changed",
            BreakKind::NamesChanged => "names changed",
            BreakKind::VersionRemoved => "version removed",
            BreakKind::VersionNotServed => "version no longer served",
            BreakKind::StorageVersionChanged => "storage version changed without conversion",
            BreakKind::FieldRemoved => "field removed",
            BreakKind::TypeNarrowed => "type narrowed",
            BreakKind::UnknownFieldsPruned => "unknown fields now pruned",
            BreakKind::EnumNarrowed => "enum narrowed",
            BreakKind::NewlyRequired => "newly required",
            BreakKind::ValidationTightened => "validation tightened",
        }
    }
}

/// One breaking change: which CRD, where, what.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Break {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    /// The version and the field path (`v1beta1 .spec.placement`), or empty for the CRD.
    pub at: String,
    /// What changed.
    pub kind: BreakKind,
    /// Details: the old and the new value.
    pub detail: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.crd, self.kind.as_str())?;
        if !self.at.is_empty() {
            write!(f, " at {}", self.at)?;
        }
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

fn name_of(crd: &Value) -> String {
    crd.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string()
}

/// Every breaking change from the `previous` CRDs to the `current` ones, matched by name.
/// CRDs only in `current` are new, hence compatible.
pub fn compare_sets(previous: &[Value], current: &[Value]) -> Vec<Break> {
    let current: BTreeMap<String, &Value> = current.iter().map(|c| (name_of(c), c)).collect();
    let mut breaks = Vec::new();
    for old in previous {
        let name = name_of(old);
        match current.get(&name) {
            Some(new) => breaks.extend(compare(old, new)),
            None => breaks.push(Break {
                crd: name,
                at: String::new(),
                kind: BreakKind::CrdRemoved,
                detail: String::new(),
            }),
        }
    }
    breaks.sort();
    breaks
}

/// Every breaking change from one CRD to its next generation.
pub fn compare(old: &Value, new: &Value) -> Vec<Break> {
    let mut out = Findings {
        crd: name_of(old),
        breaks: Vec::new(),
    };
    let str_at = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    let (old_scope, new_scope) = (str_at(old, "/spec/scope"), str_at(new, "/spec/scope"));
    if old_scope != new_scope {
        out.push("", BreakKind::ScopeChanged, changed(&old_scope, &new_scope));
    }
    for field in ["kind", "plural"] {
        let p = format!("/spec/names/{field}");
        let (o, n) = (str_at(old, &p), str_at(new, &p));
        if o != n {
            out.push(
                "",
                BreakKind::NamesChanged,
                format!("{field}: {}", changed(&o, &n)),
            );
        }
    }
    let old_versions = versions(old);
    let new_versions = versions(new);
    for (name, old_v) in &old_versions {
        let Some(new_v) = new_versions.get(name) else {
            out.push(name, BreakKind::VersionRemoved, String::new());
            continue;
        };
        if served(old_v) && !served(new_v) {
            out.push(name, BreakKind::VersionNotServed, String::new());
        }
        if let (Some(o), Some(n)) = (schema(old_v), schema(new_v)) {
            compare_schema(&mut out, name, "", o, n);
        }
    }
    check_storage(&mut out, &old_versions, &new_versions, new);
    out.breaks
}

struct Findings {
    crd: String,
    breaks: Vec<Break>,
}

impl Findings {
    fn push(&mut self, at: &str, kind: BreakKind, detail: String) {
        self.breaks.push(Break {
            crd: self.crd.clone(),
            at: at.to_string(),
            kind,
            detail,
        });
    }
}

fn changed<T: std::fmt::Debug>(old: &T, new: &T) -> String {
    format!("{old:?} → {new:?}")
}

fn versions(crd: &Value) -> BTreeMap<String, &Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v.get("name")?.as_str()?.to_string(), v)))
        .collect()
}

fn served(version: &Value) -> bool {
    version.get("served").and_then(Value::as_bool) == Some(true)
}

fn storage(versions: &BTreeMap<String, &Value>) -> Option<String> {
    versions
        .iter()
        .find(|(_, v)| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|(name, _)| name.clone())
}

fn schema(version: &Value) -> Option<&Value> {
    version.pointer("/schema/openAPIV3Schema")
}

/// A new storage version is fine when the old one is still served and objects convert:
/// through a conversion webhook, or — strategy `None` only rewrites `apiVersion` — when
/// both versions have the same schema.
fn check_storage(
    out: &mut Findings,
    old_versions: &BTreeMap<String, &Value>,
    new_versions: &BTreeMap<String, &Value>,
    new: &Value,
) {
    let (Some(from), Some(to)) = (storage(old_versions), storage(new_versions)) else {
        return;
    };
    if from == to {
        return;
    }
    let webhook = new
        .pointer("/spec/conversion/strategy")
        .and_then(Value::as_str)
        == Some("Webhook");
    let old_still_served = new_versions.get(&from).is_some_and(|v| served(v));
    let same_schema = new_versions.get(&from).and_then(|v| schema(v))
        == new_versions.get(&to).and_then(|v| schema(v));
    if !(old_still_served && (webhook || same_schema)) {
        out.push("", BreakKind::StorageVersionChanged, changed(&from, &to));
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn int_or_string(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
}

fn type_of(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str)
}

/// Whether every value the old type accepts is accepted by the new one.
fn type_widens_or_keeps(old: &Value, new: &Value) -> bool {
    if int_or_string(old) {
        return int_or_string(new) || (type_of(new).is_none() && preserves_unknown(new));
    }
    if int_or_string(new) {
        return matches!(type_of(old), Some("integer" | "string"));
    }
    match (type_of(old), type_of(new)) {
        (None, None) => true,
        // Free-form now: anything is accepted.
        (Some(_), None) => preserves_unknown(new),
        // Typed now where anything was accepted.
        (None, Some(_)) => false,
        (Some(o), Some(n)) => o == n || (o == "integer" && n == "number"),
    }
}

fn string_set(v: Option<&Value>) -> BTreeSet<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|x| x.to_string())
        .collect()
}

fn compare_schema(out: &mut Findings, version: &str, path: &str, old: &Value, new: &Value) {
    let at = |p: &str| format!("{version} {}", if p.is_empty() { "." } else { p });
    if !type_widens_or_keeps(old, new) {
        let detail = changed(&type_of(old), &type_of(new));
        out.push(&at(path), BreakKind::TypeNarrowed, detail);
        return;
    }
    if preserves_unknown(old) && !preserves_unknown(new) {
        out.push(&at(path), BreakKind::UnknownFieldsPruned, String::new());
    }
    let (old_enum, new_enum) = (old.get("enum"), new.get("enum"));
    if let Some(new_enum) = new_enum {
        let new_set = string_set(Some(new_enum));
        match old_enum {
            None => out.push(&at(path), BreakKind::EnumNarrowed, "enum introduced".into()),
            Some(old_enum) => {
                let gone: Vec<String> = string_set(Some(old_enum))
                    .difference(&new_set)
                    .cloned()
                    .collect();
                if !gone.is_empty() {
                    out.push(
                        &at(path),
                        BreakKind::EnumNarrowed,
                        format!("removed {}", gone.join(", ")),
                    );
                }
            }
        }
    }
    let old_required = string_set(old.get("required"));
    for field in string_set(new.get("required")).difference(&old_required) {
        out.push(
            &at(path),
            BreakKind::NewlyRequired,
            field.trim_matches('"').to_string(),
        );
    }
    compare_validations(out, &at(path), old, new);
    compare_properties(out, version, path, old, new);
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let (Some(o), Some(n)) = (old.get(key), new.get(key))
            && o.is_object()
            && n.is_object()
        {
            compare_schema(out, version, &format!("{path}{suffix}"), o, n);
        }
    }
}

/// Upper bounds: a new one, or a lower one, rejects what was accepted.
const UPPER_BOUNDS: [&str; 4] = ["maxLength", "maxItems", "maxProperties", "maximum"];
/// Lower bounds: a new one, or a higher one, rejects what was accepted.
const LOWER_BOUNDS: [&str; 4] = ["minLength", "minItems", "minProperties", "minimum"];
/// Keywords whose appearance or change can reject what was accepted (a list of unique
/// items, or of unique keys, rejects duplicates an atomic list took).
const EXACT: [&str; 7] = [
    "pattern",
    "format",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "uniqueItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
];

fn compare_validations(out: &mut Findings, at: &str, old: &Value, new: &Value) {
    let number = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    for key in UPPER_BOUNDS {
        if let Some(n) = number(new, key)
            && number(old, key).is_none_or(|o| n < o)
        {
            let detail = format!("{key}: {:?} → {n}", number(old, key));
            out.push(at, BreakKind::ValidationTightened, detail);
        }
    }
    for key in LOWER_BOUNDS {
        if let Some(n) = number(new, key)
            && number(old, key).is_none_or(|o| n > o)
        {
            let detail = format!("{key}: {:?} → {n}", number(old, key));
            out.push(at, BreakKind::ValidationTightened, detail);
        }
    }
    for key in EXACT {
        // `false` and `atomic` are the defaults: dropping to them loosens.
        let set = |v: &Value| {
            v.get(key)
                .filter(|x| **x != Value::Bool(false) && x.as_str() != Some("atomic"))
                .cloned()
        };
        if let Some(n) = set(new)
            && set(old).as_ref() != Some(&n)
        {
            let detail = format!("{key}: {:?} → {n}", set(old));
            out.push(at, BreakKind::ValidationTightened, detail);
        }
    }
}

fn compare_properties(out: &mut Findings, version: &str, path: &str, old: &Value, new: &Value) {
    let Some(old_props) = old.get("properties").and_then(Value::as_object) else {
        return;
    };
    let new_props = new.get("properties").and_then(Value::as_object);
    for (field, old_field) in old_props {
        let child = format!("{path}.{field}");
        match new_props.and_then(|p| p.get(field)) {
            Some(new_field) => compare_schema(out, version, &child, old_field, new_field),
            // A parent that keeps unknown fields keeps this one too.
            None if preserves_unknown(new) => {}
            None => out.push(
                &format!("{version} {child}"),
                BreakKind::FieldRemoved,
                String::new(),
            ),
        }
    }
}

#[cfg(test)]
#[path = "compat_tests.rs"]
mod tests;
