//! The built-in health rules of the workload kinds, written as CEL like any FTC's own
//! `spec.health`: a workload is healthy once its member reports it rolled out — status of
//! the current generation, every desired pod updated and ready (Deployments: available,
//! with no pod of an older version left; Jobs: every completion succeeded). Otherwise the
//! message says why in the member's words: its first condition that is not True, and its
//! pod counters.

use super::{CompiledRules, RuleError};
use flotilla_api::health::{HealthRules, ReplicaRules};
use flotilla_api::workload::WorkloadKind;

/// A whole-number field of `obj`, 0 when absent or null.
fn n(obj: &str, field: &str) -> String {
    or(obj, field, "0")
}

/// A field of `obj`, `default` when absent or null.
fn or(obj: &str, field: &str, default: &str) -> String {
    format!("(has({obj}.{field}) && {obj}.{field} != null ? {obj}.{field} : {default})")
}

/// The status is of the object's current generation (or either is unknown, as for Jobs).
const CURRENT: &str = "(!has(metadata.generation) || !has(status.observedGeneration) \
     || status.observedGeneration >= metadata.generation)";

/// The member's conditions that are not True, as `Type Reason: message`.
const NOT_TRUE: &str = "(has(status.conditions) ? status.conditions : [])\
     .filter(c, !has(c.status) || c.status != 'True')\
     .map(c, ((has(c.type) ? c.type : '') + ' ' + (has(c.reason) ? c.reason : '') + ': ' \
     + (has(c.message) ? c.message : '')).trim())";

/// The message of a workload that is not rolled out, `pods` being its pod figure (a CEL
/// string expression).
fn message(pods: &str) -> String {
    format!(
        "!has(self.status) ? 'the member reports no status yet' : \
         ({NOT_TRUE}.size() > 0 ? {NOT_TRUE}[0] + ' (' + {pods} + ')' : 'not rolled out: ' + {pods})"
    )
}

/// The rules of a kind, as CEL source.
pub fn builtin_rules(kind: WorkloadKind) -> HealthRules {
    let replicas = or("spec", "replicas", "1");
    let (healthy, pods, ready, desired) = match kind {
        WorkloadKind::Deployment => (
            format!(
                "{u} >= {replicas} && {r} >= {replicas} && {a} >= {replicas} && {total} <= {u}",
                u = n("status", "updatedReplicas"),
                r = n("status", "readyReplicas"),
                a = n("status", "availableReplicas"),
                total = n("status", "replicas"),
            ),
            format!(
                "string({u}) + ' updated, ' + string({r}) + ' ready, ' + string({a}) \
                 + ' available of ' + string({replicas}) + ' replicas; ' + string({total}) + ' in total'",
                u = n("status", "updatedReplicas"),
                r = n("status", "readyReplicas"),
                a = n("status", "availableReplicas"),
                total = n("status", "replicas"),
            ),
            n("status", "readyReplicas"),
            replicas.clone(),
        ),
        WorkloadKind::ReplicaSet | WorkloadKind::StatefulSet => {
            let ready = n("status", "readyReplicas");
            let updated = match kind {
                WorkloadKind::StatefulSet => {
                    format!("{} >= {replicas} && ", n("status", "updatedReplicas"))
                }
                _ => String::new(),
            };
            (
                format!("{updated}{ready} >= {replicas}"),
                format!("string({ready}) + '/' + string({replicas}) + ' pods ready'"),
                ready,
                replicas.clone(),
            )
        }
        WorkloadKind::DaemonSet => {
            let desired = n("status", "desiredNumberScheduled");
            let ready = n("status", "numberReady");
            (
                format!(
                    "{} >= {desired} && {ready} >= {desired}",
                    n("status", "updatedNumberScheduled")
                ),
                format!("string({ready}) + '/' + string({desired}) + ' pods ready'"),
                ready,
                desired,
            )
        }
        WorkloadKind::Job => {
            let desired = or("spec", "completions", "1");
            let done = n("status", "succeeded");
            (
                format!("{done} >= {desired}"),
                format!("string({done}) + '/' + string({desired}) + ' completions'"),
                done,
                desired,
            )
        }
    };
    HealthRules {
        healthy: Some(format!("has(self.status) && {CURRENT} && {healthy}")),
        progressing: None,
        failed: None,
        message: Some(message(&pods)),
        replicas: Some(ReplicaRules { desired, ready }),
    }
}

/// The compiled built-in rules of a kind.
pub(super) fn rules(kind: WorkloadKind) -> Result<CompiledRules, RuleError> {
    CompiledRules::compile(&builtin_rules(kind))
}
