//! Flotilla's integration and end-to-end tests, compiled as one test binary.
//!
//! Each file beside this one is a module: `cargo nextest run -p flotilla-tests -E
//! 'test(/^policies::/)'` runs one file's tests, `cargo test -p flotilla-tests --test
//! integration policies::` too. One binary instead of one per file: every file links the
//! whole project, so 60 binaries took 60 links and about 10 GB of disk in a clean build;
//! one takes one link and a sixtieth of that.

// Shared by several files: the fault helpers, the soak's checks, the Prometheus harness and
// the library tests' kit.
mod fault_harness;
mod library_support;
mod prometheus_harness;
mod soak;

// The library's two examples, compiled in for the tests that drive them.
#[path = "../../multicluster/examples/configmap_sync/sync.rs"]
#[allow(dead_code)] // The example's items the tests do not call.
mod configmap_sync;
#[path = "../../multicluster/examples/foo_controller/foo.rs"]
#[allow(dead_code)] // The example's helpers the tests do not call.
mod foo;

mod alerts;
mod bench_smoke;
mod capacity;
mod capacity_policy;
mod capacity_profiles;
mod chaos;
mod cli;
mod cli_commands;
mod cli_flags;
mod cluster_profiles;
mod crds;
mod credential_expiry;
mod credential_rotation;
mod dashboard;
mod dashboard_policies;
mod dashboard_replicas;
mod dependencies;
mod docs_site;
mod drift;
mod faults;
mod foundation;
mod health_rules;
mod host_outage;
mod image;
mod join_tokens;
mod kubectl_names;
mod kubectl_plugin;
mod kubefed_manifests;
mod library;
mod library_configmap_sync;
mod library_foo_kit;
mod library_indexes;
mod library_providers;
mod library_sharding;
mod library_unread_writes;
mod library_watch_lists;
mod lifecycle;
mod mcs_dns;
mod mcs_faults;
mod mcs_pull;
mod member_rbac;
mod multicluster_services;
mod original_manifests;
mod placement_constraints;
mod policies;
mod policy_rollout;
mod profile_access_providers;
mod propagation;
mod pull_agent_credential;
mod pull_agent_ops;
mod pull_bundles;
mod pull_dependencies;
mod pull_mode;
mod pull_parity;
mod rbac;
mod registry;
mod restart;
mod rollout;
mod rollout_canary;
mod rollout_revert;
mod rollout_rollback;
mod scheduling;
mod secret_redaction;
mod service_account_import;
mod service_account_import_webhook;
mod sharded_controllers;
mod standards;
mod traces;
mod uninstall;
mod upgrade;
mod webhook_certificate_expiry;
mod workloads;
