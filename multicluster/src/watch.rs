//! The one watch loop of the control plane: a `watcher` (optionally label-filtered, with
//! kube's default backoff) feeding a reflector store, and a callback for every change.
//!
//! Host-side controllers use [`reflect`]; the member runtime
//! ([`crate::MemberWatch`]) uses [`watch_into`] with its cluster name, warn-level failure
//! logs, a watcher configuration (label and field selectors), and a callback that ends the
//! loop once its subscriber is gone. This module owns no queue and makes no decision: what a change means
//! is the caller's business. Readiness is the store's own (`Store::wait_until_ready`).

use std::{fmt::Debug, hash::Hash, ops::ControlFlow, sync::Arc, time::Duration};

use futures::{StreamExt, future::BoxFuture};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{debug, warn};

/// A change seen by [`watch_into`].
pub enum Change<'a, K> {
    /// An object was added, modified or deleted; the store already holds the change.
    Object(&'a K),
    /// A (re)list is about to be requested. Its objects follow as [`Change::Listed`] and
    /// [`Change::Synced`] ends it; a write answered before this change is in the list
    /// when the list reads through to storage (the default), one answered later may not
    /// be (the list's snapshot can precede it) and comes as an event after the list. A
    /// list from the watch cache ([`WatchParams::from_watch_cache`]) shows what the watch
    /// would have: never older than an event already delivered by the same API server,
    /// possibly older than a write just answered.
    Listing,
    /// An object of a (re)list. The store shows the list only once it completes
    /// ([`Change::Synced`]); until then it holds what it held before, so a caller must not
    /// take the store to show this object yet.
    Listed(&'a K),
    /// A (re)list completed: the cache is complete.
    Synced,
}

impl<'a, K> Change<'a, K> {
    /// The object of a watch event or of a list; `None` for [`Change::Listing`] and
    /// [`Change::Synced`].
    pub fn object(&self) -> Option<&'a K> {
        match self {
            Change::Object(o) | Change::Listed(o) => Some(o),
            Change::Listing | Change::Synced => None,
        }
    }
}

/// How loudly a failed watch is logged before it is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureLog {
    /// Expected failures, such as a kind whose CRD is not installed yet.
    Debug,
    /// Failures an operator should see, such as an unreachable member.
    Warn,
}

/// What a watch is and how it reports.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchParams {
    /// Names the watch in log lines ("federated object", "member").
    pub what: &'static str,
    /// The member cluster, logged with every failure; `None` on the host.
    pub cluster: Option<String>,
    /// Only objects matching this label selector are watched and cached (replaces the
    /// label selector of `config` when set).
    pub label_selector: Option<String>,
    /// The rest of the watcher's configuration (field selector, page size, ...).
    pub config: watcher::Config,
    /// Level of the failure logs.
    pub failures: FailureLog,
}

impl WatchParams {
    /// A host-side watch of every object, failures at debug level.
    pub fn host(what: &'static str) -> Self {
        WatchParams {
            what,
            cluster: None,
            label_selector: None,
            config: watcher::Config::default(),
            failures: FailureLog::Debug,
        }
    }

    /// Lists from the API server's watch cache (`resourceVersion=0`, as client-go's
    /// informers list), not read through to etcd, in one page: kube sends
    /// `resourceVersion=0` only on a list without a limit (its default page of 500 silently
    /// turned such a list into a paged read of etcd), and the watch cache answers whole
    /// anyway. A list read through to etcd with a label selector reads every object of
    /// the resource and filters after the read: for the Works of one federated type among
    /// a fleet's (tens of MiB), one page of it outlasted the API server's 60 s request
    /// limit on a saturated host, was answered `504` and started again, for ever (issue
    /// #54). The watch cache filters in memory.
    pub fn from_watch_cache(mut self) -> Self {
        self.config.page_size = None;
        self.config = self.config.any_semantic();
        self
    }

    /// A watch in a member cluster, failures at warn level with the cluster's name. Its
    /// lists read through to the member's storage, in kube's pages: a write answered
    /// before a list is requested is in it, which the agent's own writes rely on (see
    /// `OwnWrites::relisted` in flotilla-agent). (These lists were meant to come from the
    /// watch cache; kube drops `resourceVersion=0` from a paged list, so they never did.)
    pub fn member(cluster: impl Into<String>, config: watcher::Config) -> Self {
        WatchParams {
            what: "member",
            cluster: Some(cluster.into()),
            label_selector: None,
            config,
            failures: FailureLog::Warn,
        }
    }

    fn config(&self) -> watcher::Config {
        match &self.label_selector {
            Some(selector) => self.config.clone().labels(selector),
            None => self.config.clone(),
        }
    }

    fn log_failure(&self, resource: &str, error: &watcher::Error) {
        let cluster = self.cluster.as_deref();
        let what = self.what;
        // An expired resource version is the normal end of a watch: the watcher relists.
        let level = match is_expected_relist(error) {
            true => FailureLog::Debug,
            false => self.failures,
        };
        match level {
            FailureLog::Debug => {
                debug!(cluster, resource, error = %error, "{what} watch failed; retrying with backoff")
            }
            FailureLog::Warn => {
                warn!(cluster, resource, error = %error, "{what} watch failed; retrying with backoff")
            }
        }
    }
}

/// What a watch does after a failed attempt, as its caller says (see
/// [`watch_into_reporting`]).
pub enum Retry {
    /// Logged as the watch's [`WatchParams`] say, and retried after [`retry_pause`].
    AsUsual,
    /// The caller has reported the failure itself: retried once this completes (e.g. once
    /// discovery lists a kind the cluster did not serve).
    After(BoxFuture<'static, ()>),
}

/// The resource a watch URL is about, as kubectl names it: `plural.group`, or `plural`
/// for the core group (`/apis/multicluster.x-k8s.io/v1alpha1/serviceimports` →
/// `serviceimports.multicluster.x-k8s.io`, `/api/v1/namespaces/a/configmaps` →
/// `configmaps`). Every watch log line carries it.
pub fn resource_name(url: &str) -> String {
    let parts: Vec<&str> = url.trim_matches('/').split('/').collect();
    let plural = parts.last().copied().unwrap_or_default();
    match parts.as_slice() {
        ["apis", group, ..] => format!("{plural}.{group}"),
        _ => plural.to_owned(),
    }
}

/// Feeds `writer` from a watch on `api` and calls `on_change` for every change, after the
/// store has applied it. Every object is passed through `shrink` (the caller's own cut, e.g.
/// a status nobody reads, or a digest of what the trim drops) and then trimmed
/// (`managedFields` and kubectl's last-applied copy dropped) before it is stored. Errors
/// are logged as `params` says and retried with backoff. Runs until `on_change` breaks (its
/// subscriber is gone) or the task is aborted.
pub async fn watch_into<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    params: WatchParams,
    shrink: fn(&mut K),
    on_change: impl FnMut(Change<'_, K>) -> ControlFlow<()>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    watch_into_reporting(api, writer, params, shrink, on_change, |_| Retry::AsUsual).await
}

/// [`watch_into`], passing every failure to `on_failure`, which says how it is retried:
/// [`Retry::AsUsual`] logs it and pauses as [`watch_into`] does; [`Retry::After`] leaves
/// the report to the caller and waits for its future.
pub async fn watch_into_reporting<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    params: WatchParams,
    shrink: fn(&mut K),
    mut on_change: impl FnMut(Change<'_, K>) -> ControlFlow<()>,
    mut on_failure: impl FnMut(&watcher::Error) -> Retry,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let resource = resource_name(api.resource_url());
    let events = watcher(api, params.config())
        .default_backoff()
        .modify(move |o| {
            shrink(o);
            trim(o);
        });
    let stream = reflector::reflector(writer, events);
    futures::pin_mut!(stream);
    let mut failures = 0u32;
    while let Some(event) = stream.next().await {
        let flow = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                failures = 0;
                on_change(Change::Object(&o))
            }
            Ok(watcher::Event::InitApply(o)) => {
                failures = 0;
                on_change(Change::Listed(&o))
            }
            Ok(watcher::Event::InitDone) => {
                failures = 0;
                on_change(Change::Synced)
            }
            Ok(watcher::Event::Init) => on_change(Change::Listing),
            Err(error) => {
                failures = failures.saturating_add(1);
                match on_failure(&error) {
                    Retry::AsUsual => {
                        params.log_failure(&resource, &error);
                        tokio::time::sleep(retry_pause(failures)).await;
                    }
                    Retry::After(wait) => wait.await,
                }
                ControlFlow::Continue(())
            }
        };
        if flow.is_break() {
            return;
        }
    }
}

/// Whether a watcher error is the API server's `410 Gone` ("too old resource version",
/// reason `Expired`): the resource version a watch resumed from has been compacted away.
/// That is how every long watch ends sooner or later, and the watcher answers it by
/// relisting, so it is logged at debug level, not as a failure an operator should see.
pub fn is_expected_relist(error: &watcher::Error) -> bool {
    let gone = |status: &kube::core::Status| {
        status.code == 410
            || status.reason == "Expired"
            || status.reason == "Gone"
            || status.message.contains("too old resource version")
    };
    match error {
        watcher::Error::WatchError(status) => gone(status),
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => gone(status),
        _ => false,
    }
}

/// The API server's message when a watcher error is its `404 Not Found` for the list or
/// watch of a whole resource: the cluster does not serve the kind (its CRD is not
/// installed, or the group/version is off). Retrying soon cannot help; only a discovery
/// change can. `None` for every other error.
pub fn not_served(error: &watcher::Error) -> Option<&str> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        _ => return None,
    };
    (status.code == 404).then_some(status.message.as_str())
}

/// Extra pause after the `failures`-th failed attempt in a row. kube's backoff restarts at
/// 0.8 s on every relist (the watcher reports `Init` before listing), so a watch that keeps
/// failing — a kind a member does not serve, a forbidden list — would retry about once a
/// second forever; this grows the pause to ten seconds instead (short enough that a watch
/// is back soon after an outage ends).
pub fn retry_pause(failures: u32) -> Duration {
    let seconds = 1u64 << failures.saturating_sub(1).min(4);
    Duration::from_secs(seconds.min(10))
}

/// A host-side cache of one kind (as `params` says) whose every change wakes `changed`:
/// for controllers that recompute everything in one pass when anything changed.
pub fn notifying_store<K>(
    api: Api<K>,
    params: WatchParams,
    changed: &Arc<Notify>,
) -> (reflector::Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    notifying_store_with(api, (), params, changed)
}

/// [`notifying_store`] for any kind, dynamic ones included (`dyntype`: e.g. the
/// `ApiResource` of a `DynamicObject`).
pub fn notifying_store_with<K>(
    api: Api<K>,
    dyntype: K::DynamicType,
    params: WatchParams,
    changed: &Arc<Notify>,
) -> (reflector::Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::<K>::new(dyntype);
    let store = writer.as_reader();
    let changed = changed.clone();
    let task = tokio::spawn(watch_into(
        api,
        writer,
        params,
        |_| {},
        move |_| {
            changed.notify_one();
            ControlFlow::Continue(())
        },
    ));
    (store, task)
}

/// The annotation `kubectl apply` keeps: a second copy of the whole object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no controller reads from a cache, before it is stored: `managedFields` and
/// `kubectl apply`'s copy of the object — together often larger than the object itself
/// (writes never send a cached object back, so nothing is lost in the cluster).
fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// [`watch_into`] for a host-side cache of every object of a kind, failures at debug level
/// under `what` (a kind whose CRD is not installed yet is normal). Runs until aborted.
pub async fn reflect<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    on_change: impl FnMut(Change<'_, K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    reflect_shrunk(api, writer, what, |_| {}, on_change).await
}

/// [`reflect`], every object passed through `shrink` before it is stored (e.g.
/// [`crate::packed::pack`]).
pub async fn reflect_shrunk<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    shrink: fn(&mut K),
    mut on_change: impl FnMut(Change<'_, K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    watch_into(api, writer, WatchParams::host(what), shrink, |change| {
        on_change(change);
        ControlFlow::Continue(())
    })
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn failing_watches_pause_longer_up_to_ten_seconds() {
        let pauses: Vec<u64> = (1..=7).map(|n| super::retry_pause(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 10, 10, 10]);
    }

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Box<kube::core::Status> {
        let mut status = kube::core::Status::failure(message, reason);
        status.code = code;
        Box::new(status)
    }

    #[test]
    fn an_expired_resource_version_is_an_expected_relist() {
        let too_old = status(410, "Expired", "too old resource version: 1 (4075)");
        assert!(is_expected_relist(&watcher::Error::WatchError(
            too_old.clone()
        )));
        assert!(is_expected_relist(&watcher::Error::WatchStartFailed(
            kube::Error::Api(too_old)
        )));
        // Some API servers send the message with another code.
        let by_message = status(500, "", "too old resource version: 7 (9)");
        assert!(is_expected_relist(&watcher::Error::WatchError(by_message)));
    }

    #[test]
    fn a_404_is_a_kind_not_served_and_nothing_else_is() {
        // What kube makes of the API server's plain-text "404 page not found".
        let not_found = status(404, "Failed to parse error data", "404 page not found");
        let list = watcher::Error::InitialListFailed(kube::Error::Api(not_found.clone()));
        assert_eq!(not_served(&list), Some("404 page not found"));
        assert!(not_served(&watcher::Error::WatchError(not_found)).is_some());
        let forbidden = status(403, "Forbidden", "forbidden");
        let list = watcher::Error::InitialListFailed(kube::Error::Api(forbidden));
        assert_eq!(not_served(&list), None);
        let gone = status(410, "Expired", "too old resource version: 1 (4075)");
        assert_eq!(not_served(&watcher::Error::WatchError(gone)), None);
    }

    #[test]
    fn a_watch_url_names_its_resource_like_kubectl() {
        let cases = [
            (
                "/apis/multicluster.x-k8s.io/v1alpha1/serviceimports",
                "serviceimports.multicluster.x-k8s.io",
            ),
            (
                "/apis/apps/v1/namespaces/demo/deployments",
                "deployments.apps",
            ),
            ("/api/v1/namespaces/a/configmaps", "configmaps"),
            ("/api/v1/namespaces", "namespaces"),
        ];
        for (url, name) in cases {
            assert_eq!(resource_name(url), name, "{url}");
        }
    }

    #[test]
    fn other_watch_failures_are_not_expected_relists() {
        let forbidden = status(403, "Forbidden", "secrets is forbidden");
        assert!(!is_expected_relist(&watcher::Error::WatchError(
            forbidden.clone()
        )));
        assert!(!is_expected_relist(&watcher::Error::InitialListFailed(
            kube::Error::Api(forbidden)
        )));
        assert!(!is_expected_relist(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn a_member_watch_filters_by_label_and_warns_with_its_cluster() {
        let p = WatchParams::member(
            "c1",
            watcher::Config::default().labels("kubefed.io/managed=true"),
        );
        assert_eq!(p.cluster.as_deref(), Some("c1"));
        assert_eq!(p.failures, FailureLog::Warn);
        assert_eq!(p.config().list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(
            p.config().label_selector.as_deref(),
            Some("kubefed.io/managed=true")
        );
    }

    #[test]
    fn a_list_from_the_watch_cache_is_not_paged() {
        let p = WatchParams::host("work").from_watch_cache();
        assert_eq!(p.config().list_semantic, watcher::ListSemantic::Any);
        assert_eq!(
            p.config().page_size,
            None,
            "kube drops resourceVersion=0 from a paged list"
        );
    }

    #[test]
    fn a_host_watch_sees_every_object_and_logs_failures_at_debug() {
        let p = WatchParams::host("federated object");
        assert_eq!(
            (p.cluster.as_deref(), p.failures),
            (None, FailureLog::Debug)
        );
        assert_eq!(p.config().label_selector, None);
    }

    #[test]
    fn cached_objects_lose_managed_fields_and_kubectls_copy_but_keep_other_annotations() {
        let mut cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "a",
                    "annotations": {LAST_APPLIED: "{}", "flotilla.io/desired-hash": "h1"},
                    "managedFields": [{"manager": "flotilla", "operation": "Apply"}]
                },
                "data": {"k": "v"}
            }))
            .expect("a ConfigMap");
        trim(&mut cm);
        assert_eq!(cm.metadata.managed_fields, None);
        let annotations = cm.metadata.annotations.expect("annotations kept");
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["flotilla.io/desired-hash"], "h1");
        assert_eq!(cm.data.expect("data")["k"], "v");
    }
}
