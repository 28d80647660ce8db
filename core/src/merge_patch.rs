//! JSON merge patches (RFC 7386) that replace: a key absent from a merge patch keeps its old
//! value, so a status written as a merge patch must name every key it drops with `null` —
//! at every depth (a field that an optional, skipped-when-empty value left out of
//! `status.aggregated` or `status.rollout` would otherwise stay as it was). Pure.

use serde_json::Value;

/// Sets to `null` every key of `old` that `new` lacks, recursing into objects both hold, so
/// that `new` applied as a merge patch over `old` gives exactly `new`. Arrays and scalars are
/// replaced whole by a merge patch and need nothing.
pub fn null_dropped_keys(new: &mut Value, old: &Value) {
    let (Some(new), Some(old)) = (new.as_object_mut(), old.as_object()) else {
        return;
    };
    for (key, old_value) in old {
        match new.get_mut(key) {
            None => {
                new.insert(key.clone(), Value::Null);
            }
            Some(new_value) => null_dropped_keys(new_value, old_value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 7386's merge of `patch` into `target`.
    fn merge(target: &mut Value, patch: &Value) {
        let Some(patch) = patch.as_object() else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let map = target.as_object_mut().expect("an object");
        for (k, v) in patch {
            if v.is_null() {
                map.remove(k);
            } else {
                merge(map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }

    #[test]
    fn a_nested_key_dropped_from_the_new_status_is_removed_by_the_patch() {
        let old = json!({"aggregated": {"clusters": "1/2", "ready": "3/4",
            "health": [{"cluster": "m2", "state": "Progressing"}]},
            "rollout": {"currentWave": 2, "stableRevision": "r1", "progress": "1/2"},
            "drift": [{"cluster": "m1"}]});
        let new = json!({"aggregated": {"clusters": "2/2", "ready": "4/4"},
            "rollout": {"progress": "2/2"}});
        let mut patch = new.clone();
        null_dropped_keys(&mut patch, &old);
        assert_eq!(patch["aggregated"]["health"], Value::Null);
        assert_eq!(patch["rollout"]["currentWave"], Value::Null);
        assert_eq!(patch["drift"], Value::Null);
        let mut applied = old.clone();
        merge(&mut applied, &patch);
        assert_eq!(applied, new);
    }

    #[test]
    fn kept_keys_arrays_and_new_keys_pass_unchanged() {
        let old = json!({"clusters": [{"name": "a"}], "observedGeneration": 1});
        let new = json!({"clusters": [{"name": "b"}], "observedGeneration": 2, "placement": {}});
        let mut patch = new.clone();
        null_dropped_keys(&mut patch, &old);
        assert_eq!(patch, new);
        let mut scalar = json!(3);
        null_dropped_keys(&mut scalar, &old);
        assert_eq!(scalar, json!(3));
    }
}
