//! kubefed's `kubefed.io/deleteoption` annotation: JSON `DeleteOptions` a federated object
//! carries for the deletion of its member objects.

use flotilla_api::DELETE_OPTIONS_ANNOTATION;
use kube::{
    ResourceExt,
    api::{DeleteParams, PropagationPolicy},
    core::DynamicObject,
};
use tracing::warn;

/// The member delete options of kubefed's `kubefed.io/deleteoption` annotation on `fed`
/// (a malformed one is logged and ignored).
pub(super) fn of_object(fed: &DynamicObject) -> DeleteParams {
    let Some(raw) = fed.annotations().get(DELETE_OPTIONS_ANNOTATION) else {
        return DeleteParams::default();
    };
    match parse_delete_options(raw) {
        Ok(dp) => dp,
        Err(e) => {
            warn!(error = %e, "ignoring malformed {DELETE_OPTIONS_ANNOTATION} annotation");
            DeleteParams::default()
        }
    }
}

/// Parses kubefed's `kubefed.io/deleteoption` annotation (JSON DeleteOptions).
pub fn parse_delete_options(raw: &str) -> Result<DeleteParams, serde_json::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        grace_period_seconds: Option<u32>,
        propagation_policy: Option<String>,
        preconditions: Option<RawPre>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RawPre {
        resource_version: Option<String>,
        uid: Option<String>,
    }
    let r: Raw = serde_json::from_str(raw)?;
    let propagation_policy = match r.propagation_policy.as_deref() {
        None => None,
        Some("Orphan") => Some(PropagationPolicy::Orphan),
        Some("Background") => Some(PropagationPolicy::Background),
        Some("Foreground") => Some(PropagationPolicy::Foreground),
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "propagationPolicy {other:?} is not one of Orphan, Background, Foreground"
            )));
        }
    };
    Ok(DeleteParams {
        grace_period_seconds: r.grace_period_seconds,
        propagation_policy,
        preconditions: r.preconditions.map(|p| kube::api::Preconditions {
            resource_version: p.resource_version,
            uid: p.uid,
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_options_annotation_parses_kubefeds_json() {
        let dp = parse_delete_options(r#"{"propagationPolicy":"Orphan","gracePeriodSeconds":5}"#)
            .expect("parses");
        assert!(matches!(
            dp.propagation_policy,
            Some(PropagationPolicy::Orphan)
        ));
        assert_eq!(dp.grace_period_seconds, Some(5));
    }

    #[test]
    fn an_unknown_propagation_policy_is_an_error_naming_it() {
        let err =
            parse_delete_options(r#"{"propagationPolicy":"Sideways"}"#).expect_err("rejected");
        assert!(err.to_string().contains("Sideways"));
    }
}
