//! # flotilla-multicluster
//!
//! A multi-cluster controller runtime for kube-rs, the one Flotilla's own controllers run
//! on. See docs/library.md for a tutorial and the guarantees.
//!
//! - **Clusters** ([`ClusterSet`]): engaged by [`Provider`]s ([`provider`]: kubeconfig
//!   files, kubeconfig Secrets, ClusterProfiles with exec credential plugins, Flotilla's
//!   KubeFedCluster registry, namespace-per-cluster for tests), each engagement with a
//!   cancellation token; or fixed ([`sources::StaticClusters`], health-checked).
//! - **Watches** ([`MemberWatch`]): one kube-runtime watcher + reflector per Ready cluster
//!   (with kube's backoff), started when the cluster turns Ready, stopped when it leaves.
//! - **Controllers** ([`Controller`]): a primary kind, secondary watches with mappers,
//!   reconcile keys `(cluster, namespace, name)` ([`ObjectKey`]), per-key deduplication
//!   and backoff ([`workqueue::WorkQueue`]), concurrency, metrics, Events in the object's
//!   own cluster.
//! - **Runners** ([`runner`]): the keyed runner (any key type, N workers behind a gate,
//!   per-key backoff, metrics, graceful stop) and the pass runner (level-triggered passes,
//!   debounced, periodic, retried) the controllers of Flotilla run on.
//! - **Indexes and sync timeouts** ([`index`], [`sync_state`]): indexes by label, field or
//!   owner kept for every cluster; a cluster whose cache does not sync in time is reported
//!   with a reason instead of stalling the others.
//! - **Sharding** ([`shard`], experimental): replicas split the clusters by rendezvous
//!   hashing over peer Leases, with a fence Lease per cluster.
//! - **Cross-cluster ownership** ([`ownership`], [`gc`]): owner references between
//!   clusters, a finalizer-based garbage collector, and a collector of dependents whose
//!   owner is confirmed gone — never of those whose owner's cluster is only unreachable.
//!
//! ```no_run
//! use std::sync::Arc;
//! use flotilla_multicluster::{Action, ClusterSet, Context, Controller, WatchOptions};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! # async fn demo(set: ClusterSet) {
//! #[derive(Debug, thiserror::Error)]
//! #[error("never")]
//! struct Never;
//!
//! async fn reconcile(cm: Arc<ConfigMap>, ctx: Context<()>) -> Result<Action, Never> {
//!     println!("{} changed", ctx.key());
//!     Ok(Action::await_change())
//! }
//!
//! Controller::<ConfigMap>::new("configmaps", set, WatchOptions::all())
//!     .run(reconcile, |_, _, _| Action::backoff(), Arc::new(()))
//!     .await;
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cluster_set;
pub mod controller;
pub mod credentials;
mod error;
pub mod events;
pub mod gate;
pub mod gc;
pub mod http;
pub mod index;
pub mod kubefed;
pub mod member_watch;
pub mod ownership;
pub mod packed;
pub mod provider;
pub mod runner;
pub mod shard;
pub mod sources;
pub mod sync_state;
pub mod tasks;
pub mod unread;
pub mod watch;
pub mod workqueue;
pub mod written;

pub use cluster_set::{ClusterEvent, ClusterSet, ClusterState, Engagement, ReadyCluster};
pub use controller::{Action, Cache, Context, Controller, ControllerMetrics, ObjectKey};
pub use error::{Error, error_chain};
pub use member_watch::{ClusterSelector, MemberEvent, MemberWatch, WatchOptions};
pub use ownership::{DeletionPolicy, MultiClusterOwner};
pub use provider::{Provider, ProviderHandle};
pub use sync_state::SyncState;
