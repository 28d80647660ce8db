//! The two spellings of an override path: a JSON pointer (`/spec/replicas`, kubefed
//! v1beta1) and the dotted field path of kubefed's alpha API (`spec.replicas`), turned into
//! one JSON pointer so that every later step (forbidden paths, duplicates, patching) sees a
//! single form.
//!
//! kubefed's alpha split a dotted path on `.` and set the field with
//! `unstructured.SetNestedField`, which walks maps only: it had no way to address a list
//! element. Flotilla accepts the two spellings users reach for when they need one, a
//! numeric segment (`containers.0.image`) and a bracket index (`containers[0].image`), both
//! meaning element 0 (a numeric segment under a map is the map key, as in a JSON pointer).
//! A dotted path cannot name a key containing `.`, `/` or `~` (annotation keys, say):
//! such a path is rejected with a hint to write the JSON pointer instead.

/// Why a path is neither a JSON pointer nor a dotted field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error(
        "the path is empty; write a JSON pointer (/spec/replicas) or a dotted path (spec.replicas)"
    )]
    Empty,
    /// A dotted path with an empty segment (`spec..replicas`, `.spec`, `spec.`).
    #[error("segment {index} of the dotted path is empty")]
    EmptySegment {
        /// 1-based position of the segment.
        index: usize,
    },
    /// A character a dotted path cannot carry.
    #[error(
        "{found:?} cannot appear in a dotted path; for keys containing '.', '/' or '~' write a JSON pointer starting with '/' (escape '/' as ~1, '~' as ~0)"
    )]
    BadCharacter {
        /// The character.
        found: char,
    },
    /// A bracket index that is not `[<digits>]`, or a stray bracket.
    #[error("malformed list index in segment {segment:?}: write [0] or .0")]
    BadIndex {
        /// The segment as written.
        segment: String,
    },
}

/// The JSON pointer an override path stands for: a path starting with `/` as it is, a
/// dotted path converted (`spec.template.spec.containers[0].image` →
/// `/spec/template/spec/containers/0/image`). Whether the pointer itself is well formed is
/// checked by the caller, as for any JSON pointer.
pub fn to_pointer(path: &str) -> Result<String, PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.starts_with('/') {
        return Ok(path.to_string());
    }
    let mut tokens = Vec::new();
    for (i, segment) in path.split('.').enumerate() {
        tokens.extend(segment_tokens(segment, i + 1)?);
    }
    Ok(tokens.iter().fold(String::new(), |mut out, t| {
        out.push('/');
        out.push_str(t);
        out
    }))
}

/// One dotted segment: a key, optionally followed by bracket indexes (`containers[0][1]`);
/// an index belongs to the key before it, so a segment never starts with `[`.
fn segment_tokens(segment: &str, index: usize) -> Result<Vec<String>, PathError> {
    if segment.is_empty() {
        return Err(PathError::EmptySegment { index });
    }
    if let Some(found) = segment
        .chars()
        .find(|c| matches!(c, '/' | '~') || c.is_whitespace())
    {
        return Err(PathError::BadCharacter { found });
    }
    let bad = || PathError::BadIndex {
        segment: segment.to_string(),
    };
    let (key, mut rest) = match segment.find('[') {
        Some(at) => segment.split_at(at),
        None => (segment, ""),
    };
    if key.is_empty() || key.contains(']') {
        return Err(bad());
    }
    let mut tokens = vec![key.to_string()];
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[').ok_or_else(bad)?;
        let close = inner.find(']').ok_or_else(bad)?;
        let digits = &inner[..close];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        tokens.push(digits.to_string());
        rest = &inner[close + 1..];
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_pointer_is_kept_as_written() {
        assert_eq!(
            to_pointer("/spec/replicas").as_deref(),
            Ok("/spec/replicas")
        );
        assert_eq!(
            to_pointer("/metadata/labels/app.kubernetes.io~1name").as_deref(),
            Ok("/metadata/labels/app.kubernetes.io~1name")
        );
    }

    #[test]
    fn a_dotted_path_becomes_the_same_pointer() {
        assert_eq!(to_pointer("spec.replicas").as_deref(), Ok("/spec/replicas"));
        assert_eq!(to_pointer("data.content").as_deref(), Ok("/data/content"));
        assert_eq!(to_pointer("spec").as_deref(), Ok("/spec"));
    }

    #[test]
    fn list_indexes_are_read_as_numeric_segments_or_brackets() {
        let want = Ok("/spec/template/spec/containers/0/image".to_string());
        assert_eq!(to_pointer("spec.template.spec.containers.0.image"), want);
        assert_eq!(to_pointer("spec.template.spec.containers[0].image"), want);
        assert_eq!(to_pointer("a.b[2][10]").as_deref(), Ok("/a/b/2/10"));
    }

    #[test]
    fn empty_segments_are_malformed() {
        assert_eq!(to_pointer(""), Err(PathError::Empty));
        assert_eq!(
            to_pointer("spec..replicas"),
            Err(PathError::EmptySegment { index: 2 })
        );
        assert_eq!(
            to_pointer(".spec"),
            Err(PathError::EmptySegment { index: 1 })
        );
        assert_eq!(
            to_pointer("spec."),
            Err(PathError::EmptySegment { index: 2 })
        );
    }

    #[test]
    fn slashes_tildes_and_spaces_are_not_part_of_a_dotted_path() {
        assert_eq!(
            to_pointer("spec/replicas"),
            Err(PathError::BadCharacter { found: '/' })
        );
        assert_eq!(
            to_pointer("a~b"),
            Err(PathError::BadCharacter { found: '~' })
        );
        assert_eq!(
            to_pointer("spec. replicas"),
            Err(PathError::BadCharacter { found: ' ' })
        );
    }

    #[test]
    fn malformed_brackets_are_rejected() {
        for bad in [
            "containers[",
            "containers[]",
            "containers[x]",
            "containers[0",
            "containers]0",
            "[0].image",
            "containers[0]x",
            "containers[-1]",
        ] {
            assert!(
                matches!(to_pointer(bad), Err(PathError::BadIndex { .. })),
                "{bad}: {:?}",
                to_pointer(bad)
            );
        }
    }

    #[test]
    fn errors_say_what_to_write_instead() {
        let msg = to_pointer("spec/replicas")
            .expect_err("malformed")
            .to_string();
        assert!(msg.contains("JSON pointer"), "{msg}");
        let msg = to_pointer("c[x]").expect_err("malformed").to_string();
        assert!(msg.contains("[0]"), "{msg}");
    }
}
