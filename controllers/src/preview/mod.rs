//! What a federated object would become in each cluster, as people read it: the desired
//! objects by the sync controller's own pipeline ([`desired`]) and their rendering with
//! Secret values redacted ([`render`]). Pure; shared by `flotilla diff` and the dashboard,
//! so neither depends on the other.

pub mod desired;
pub mod render;
