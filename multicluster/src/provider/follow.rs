//! The watch of the providers that follow objects in a cluster (Secrets, namespaces,
//! ClusterProfiles): a cached watch that yields the whole cache after each change, from
//! the first complete list on (the provider recomputes what it wants engaged), until the
//! provider is stopped.

use std::{fmt::Debug, hash::Hash, sync::Arc};

use futures::{Stream, StreamExt};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Every cached object of `api` (watched as `config` says) after each change, until
/// `stop` is cancelled.
pub(crate) fn snapshots<K>(
    api: Api<K>,
    config: watcher::Config,
    stop: CancellationToken,
) -> impl Stream<Item = Vec<Arc<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let (store, writer) = reflector::store();
    let mut listed = false;
    reflector::reflector(writer, watcher(api, config).default_backoff())
        .filter_map(move |event| {
            let changed = match event {
                Ok(watcher::Event::InitDone) => {
                    listed = true;
                    true
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
                Ok(_) => listed,
                Err(e) => {
                    debug!(error = %e, "a provider's watch failed; retrying");
                    false
                }
            };
            std::future::ready(changed.then(|| store.state()))
        })
        .take_until(stop.cancelled_owned())
}
