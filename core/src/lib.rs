//! Flotilla's pure decisions: "observed state in, operations out" functions over the API
//! types of `flotilla-api` — which clusters a federated object goes to ([`placement`],
//! [`schedule`]), what each member object looks like ([`overrides`], [`desired`],
//! [`defaults`]), how a new template reaches the clusters ([`rollout`]), whether a member
//! object drifted and what to do about it ([`drift`]), whether it is healthy ([`health`],
//! CEL rules; [`workload`] sums it), which dependencies follow a workload
//! ([`dependencies`], [`dependency_plan`]), which of two twins propagates ([`alpha`]), the
//! conventions of member objects ([`member`], [`agent_role`]) and what a person may see
//! ([`redact`]). The controllers, the agent, the CLI and the dashboard all call these, so
//! what is previewed is what is done.
//!
//! No I/O, no clock (callers pass "now"), no API types of its own: a type that is written
//! into an object's spec or status belongs to `flotilla-api`.
#![forbid(unsafe_code)]

pub mod agent_role;
pub mod alpha;
pub mod bundle;
pub mod capacity;
pub mod capacity_profile;
pub mod credential;
pub mod defaults;
pub mod dependencies;
pub mod dependency_plan;
pub mod desired;
pub mod drift;
pub mod health;
pub mod member;
pub mod merge_patch;
pub mod override_path;
pub mod overrides;
#[cfg(test)]
mod parser_props;
pub mod placement;
pub mod policy_materialize;
pub mod policy_override;
pub mod policy_replicas;
pub mod policy_select;
pub mod rebalance;
pub mod redact;
pub mod replica_division;
pub mod rollout;
pub mod schedule;
pub mod taint;
pub mod workload;
pub mod written_fields;
