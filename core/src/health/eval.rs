//! Compiling and evaluating a type's health rules with the `cel` crate: the member object
//! becomes CEL values once per evaluation (numbers as `int` where they are whole, so rules
//! compare them with literals), and each rule's result is checked for its type.

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

use super::{Health, HealthState, Replicas};
use flotilla_api::health::HealthRules;

/// A rule of `spec.health` that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.health.{field}: {message}")]
pub struct RuleError {
    /// The field, e.g. `healthy` or `replicas.ready`.
    pub field: &'static str,
    /// The compiler's words.
    pub message: String,
}

impl RuleError {
    /// The reason shown on the FTC and on objects of its type.
    pub const REASON: &'static str = "InvalidHealthRule";
}

/// The CEL environment: the standard library and the strings extension (`trim`, ...).
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The strings extension only adds functions; it cannot clash with the stdlib.
        let _ = env.add_extension(cel::extensions::strings);
        Arc::new(env)
    })
}

/// A type's rules, compiled.
#[derive(Debug)]
pub struct CompiledRules {
    healthy: Option<Program>,
    progressing: Option<Program>,
    failed: Option<Program>,
    message: Option<Program>,
    replicas: Option<(Program, Program)>,
}

fn compile_one(field: &'static str, source: &str) -> Result<Program, RuleError> {
    env().compile(source).map_err(|e| RuleError {
        field,
        message: e.to_string().replace('\n', "; "),
    })
}

fn compile(field: &'static str, source: Option<&String>) -> Result<Option<Program>, RuleError> {
    source.map(|s| compile_one(field, s)).transpose()
}

impl CompiledRules {
    /// Compiles every rule; the first that does not compile is the error.
    pub fn compile(rules: &HealthRules) -> Result<CompiledRules, RuleError> {
        let replicas = match &rules.replicas {
            Some(r) => Some((
                compile_one("replicas.ready", &r.ready)?,
                compile_one("replicas.desired", &r.desired)?,
            )),
            None => None,
        };
        Ok(CompiledRules {
            healthy: compile("healthy", rules.healthy.as_ref())?,
            progressing: compile("progressing", rules.progressing.as_ref())?,
            failed: compile("failed", rules.failed.as_ref())?,
            message: compile("message", rules.message.as_ref())?,
            replicas,
        })
    }

    /// Whether the rules give a replica figure.
    pub fn has_replicas(&self) -> bool {
        self.replicas.is_some()
    }

    /// The health of `member`; a rule that fails on it makes it failed with the error.
    pub fn evaluate(&self, member: &Value) -> Health {
        let ctx = context(member);
        match self.try_evaluate(&ctx) {
            Ok(health) => health,
            Err(message) => Health {
                state: HealthState::Failed,
                message: Some(message),
                replicas: None,
            },
        }
    }

    fn try_evaluate(&self, ctx: &Context<'_, '_>) -> Result<Health, String> {
        let replicas = match &self.replicas {
            Some((ready, desired)) => Some(Replicas {
                ready: int(ctx, "replicas.ready", ready)?,
                desired: int(ctx, "replicas.desired", desired)?,
            }),
            None => None,
        };
        let is = |field, p: &Option<Program>, absent| match p {
            Some(p) => boolean(ctx, field, p),
            None => Ok(absent),
        };
        let state = if is("failed", &self.failed, false)? {
            HealthState::Failed
        } else if is("healthy", &self.healthy, true)? {
            HealthState::Healthy
        } else if is("progressing", &self.progressing, true)? {
            HealthState::Progressing
        } else {
            HealthState::Failed
        };
        let message = match (&self.message, state) {
            (_, HealthState::Healthy) => None,
            (Some(p), _) => Some(string(ctx, p)?),
            (None, HealthState::Failed) if self.failed.is_some() => {
                Some("the failed rule holds".into())
            }
            (None, HealthState::Failed) => Some("not healthy and no longer progressing".into()),
            (None, _) => Some("not healthy yet".into()),
        };
        Ok(Health {
            state,
            message,
            replicas,
        })
    }
}

/// The variables a rule sees: `self` and `object` (the member object), and its
/// `metadata`, `spec` and `status` (`{}` when absent or null).
fn context(member: &Value) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(env().clone());
    let part = |name: &str| match member.get(name) {
        Some(v) if !v.is_null() => to_cel(v),
        _ => Cel::from(HashMap::<String, Cel>::new()),
    };
    let mut object = member.clone();
    if let Some(map) = object.as_object_mut()
        && map.get("status").is_some_and(Value::is_null)
    {
        map.remove("status");
    }
    let object = to_cel(&object);
    ctx.add_variable_from_value("metadata", part("metadata"));
    ctx.add_variable_from_value("spec", part("spec"));
    ctx.add_variable_from_value("status", part("status"));
    ctx.add_variable_from_value("object", object.clone());
    ctx.add_variable_from_value("self", object);
    ctx
}

/// JSON as CEL: whole numbers are `int` (JSON from the API has no `uint`).
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => Cel::from(
            o.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Cel>>(),
        ),
    }
}

fn run(ctx: &Context<'_, '_>, field: &str, p: &Program) -> Result<Cel, String> {
    p.execute(ctx)
        .map_err(|e| format!("health rule {field} failed: {e}"))
}

fn boolean(ctx: &Context<'_, '_>, field: &str, p: &Program) -> Result<bool, String> {
    match run(ctx, field, p)? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!(
            "health rule {field} gave {}, not a bool",
            other.type_of()
        )),
    }
}

fn int(ctx: &Context<'_, '_>, field: &str, p: &Program) -> Result<i64, String> {
    match run(ctx, field, p)? {
        Cel::Int(i) => Ok(i),
        Cel::UInt(u) => i64::try_from(u).map_err(|e| format!("health rule {field}: {e}")),
        Cel::Float(f) if f.fract() == 0.0 => Ok(f as i64),
        other => Err(format!(
            "health rule {field} gave {}, not an int",
            other.type_of()
        )),
    }
}

fn string(ctx: &Context<'_, '_>, p: &Program) -> Result<String, String> {
    match run(ctx, "message", p)? {
        Cel::String(s) => Ok(s.to_string()),
        other => Err(format!(
            "health rule message gave {}, not a string",
            other.type_of()
        )),
    }
}
