//! Content hashes of JSON values, so the sync controller can tell "what I would apply now"
//! from "what I applied last time" without a write.
//!
//! The hash is SHA-256 over a canonical encoding: compact JSON with object keys sorted
//! (by their UTF-8 bytes) at every depth, so neither key order nor formatting changes it;
//! strings and numbers are written as `serde_json` writes them.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of the canonical encoding of `v`.
pub fn content_hash(v: &Value) -> String {
    let mut hasher = Sha256::new();
    write_canonical(v, &mut hasher);
    hex::encode(hasher.finalize())
}

/// `s` if it is at most `max` bytes, else its head and a hash of the whole (so two long
/// names stay apart), ending in an alphanumeric: a name or label value that fits its limit
/// (a label value 63, a DNS subdomain 253). The same `s` always gives the same result, so a
/// selector built from it finds what was labelled with it. `max` must be above 11.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let hash = content_hash(&s.into());
    let mut head: String = s.chars().take(max - 11).collect();
    while head.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        head.pop();
    }
    format!("{head}-{}", &hash[..10])
}

fn write_canonical(v: &Value, out: &mut Sha256) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.update(b"{");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                write_string(k, out);
                out.update(b":");
                write_canonical(v, out);
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                write_canonical(v, out);
            }
            out.update(b"]");
        }
        Value::String(s) => write_string(s, out),
        // Scalars print canonically already.
        scalar => out.update(scalar.to_string().as_bytes()),
    }
}

fn write_string(s: &str, out: &mut Sha256) {
    // A `Value::String` always serializes (it is valid UTF-8 and needs only escaping).
    out.update(Value::String(s.to_owned()).to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_short_values_and_cuts_long_ones_apart() {
        assert_eq!(bounded("web", 63), "web");
        let long_a = format!("{}-a", "x".repeat(70));
        let long_b = format!("{}-b", "x".repeat(70));
        let (a, b) = (bounded(&long_a, 63), bounded(&long_b, 63));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a, bounded(&long_a, 63));
        // The head never ends in a separator before the hash.
        let dotted = format!("{}.-{}", "y".repeat(50), "z".repeat(20));
        let cut = bounded(&dotted, 63);
        assert!(
            cut.starts_with(&"y".repeat(50)) && !cut.contains(".-"),
            "{cut}"
        );
        assert!(cut.ends_with(|c: char| c.is_ascii_alphanumeric()));
    }
    use serde_json::json;

    #[test]
    fn the_hash_is_hex_sha256() {
        let h = content_hash(&json!({}));
        assert_eq!(h.len(), 64);
        assert!(
            h.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // SHA-256 of the two bytes "{}".
        assert_eq!(
            h,
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"q": 1, "p": 2}], "x": null}}"#)
                .expect("json");
        let b: Value =
            serde_json::from_str(r#"{"a": {"x": null, "y": [1, {"p": 2, "q": 1}]}, "b": 1}"#)
                .expect("json");
        assert_eq!(content_hash(&a), content_hash(&b));
    }

    #[test]
    fn a_value_change_changes_the_hash() {
        let a = json!({"spec": {"replicas": 3}});
        let b = json!({"spec": {"replicas": 4}});
        assert_ne!(content_hash(&a), content_hash(&b));
    }

    #[test]
    fn array_order_changes_the_hash() {
        assert_ne!(content_hash(&json!([1, 2])), content_hash(&json!([2, 1])));
    }

    #[test]
    fn a_string_and_a_number_hash_differently() {
        assert_ne!(
            content_hash(&json!({"a": "1"})),
            content_hash(&json!({"a": 1}))
        );
    }

    #[test]
    fn keys_and_values_cannot_be_confused_by_escaping() {
        let a = json!({"a\":\"b": "c"});
        let b = json!({"a": "b\":\"c"});
        assert_ne!(content_hash(&a), content_hash(&b));
    }

    #[test]
    fn the_hash_is_stable_across_releases() {
        // Pinned: a change here invalidates every recorded hash and forces rewrites.
        assert_eq!(
            content_hash(&json!({"b": [true, null, 1.5], "a": "x"})),
            content_hash_of_bytes(br#"{"a":"x","b":[true,null,1.5]}"#)
        );
    }

    fn content_hash_of_bytes(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }
}
