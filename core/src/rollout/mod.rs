//! Progressive rollout across clusters (Flotilla extension `spec.rollout` of every
//! Federated&lt;Kind&gt;): a new template reaches the placed clusters in ordered waves, a
//! few clusters at a time, each gated on the member reporting it healthy; a failure beyond
//! the tolerated count pauses the rollout and leaves the remaining clusters untouched.
//!
//! The decisions over `flotilla_api::rollout`'s types (`spec.rollout`, `status.rollout`):
//! the pure planner ([`plan`]: which clusters may move now), the pure member health check
//! ([`health`]), the rollback decisions ([`rollback`]: `onFailure: Rollback`, `flotilla
//! rollout undo`) and the canary by replica share ([`canary`]: the shares and the step
//! gate; [`canary_flow`]: where a canary stands and what each cluster runs).
//! Nothing here does I/O: the sync controller gathers the inputs and carries out the plan.

pub mod canary;
pub mod canary_flow;
pub mod health;
pub mod plan;
pub mod rollback;
#[cfg(test)]
mod tests;
