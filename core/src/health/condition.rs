//! The FederatedTypeConfig's `HealthRules` condition: whether its `spec.health` compiled
//! (reason `InvalidHealthRule` with the field and the compiler's words when not), and
//! whether the rules can see member status at all.

use super::{RuleError, TypeHealth};
use flotilla_api::health::{HEALTH_RULES_CONDITION, HealthRules};
use flotilla_api::{
    core::{ApiResource, FederatedTypeConfigSpec, StatusCollectionMode},
    work::Condition,
};

/// The `HealthRules` condition for `rules`: (status, reason, message), or `None` when the
/// FTC has none. `collect_status`: member status is collected (the rules read it).
pub fn rules_condition(
    target: &ApiResource,
    rules: Option<&HealthRules>,
    collect_status: bool,
) -> Option<(&'static str, &'static str, String)> {
    let rules = rules?;
    let compiled = TypeHealth::of(target, Some(rules));
    Some(match compiled.invalid() {
        Some(e) => ("False", RuleError::REASON, e.to_string()),
        None if !collect_status => (
            "False",
            "StatusCollectionDisabled",
            "health rules read member status, which is collected only with \
             statusCollection: Enabled; objects are healthy once propagated"
                .into(),
        ),
        None => ("True", "Valid", "health rules compiled".into()),
    })
}

/// The FTC's `status.conditions`: the `HealthRules` condition when `spec.health` is set,
/// keeping `previous`' transition time while its status holds.
pub fn ftc_conditions(
    spec: &FederatedTypeConfigSpec,
    previous: &[Condition],
    generation: i64,
    now: &str,
) -> Vec<Condition> {
    let collect = spec.status_collection == Some(StatusCollectionMode::Enabled);
    let Some((status, reason, message)) =
        rules_condition(&spec.target_type, spec.health.as_ref(), collect)
    else {
        return Vec::new();
    };
    let prev = previous.iter().find(|c| c.type_ == HEALTH_RULES_CONDITION);
    let last_transition_time = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.to_string(),
    };
    vec![Condition {
        type_: HEALTH_RULES_CONDITION.into(),
        status: status.into(),
        observed_generation: Some(generation),
        last_transition_time,
        reason: reason.into(),
        message,
    }]
}
