//! A host-side reflector loop shared by the controllers: keep a cache of one kind and call
//! back on every change, so each controller only says what a change means to its queue.

use std::{fmt::Debug, hash::Hash};

use futures::StreamExt;
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;
use tracing::debug;

/// A change seen by [`reflect`].
pub enum Change<'a, K> {
    /// An object was added, modified or deleted (also each object of a (re)list).
    Object(&'a K),
    /// A (re)list completed: the cache is complete.
    Synced,
}

/// Feeds `writer` from a watch on `api` (all objects, with backoff on errors) and calls
/// `on_change` for every change. Runs until the task is aborted. Errors are retried and
/// logged at debug level under `what`: a kind whose CRD is not installed yet is normal.
pub async fn reflect<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    mut on_change: impl FnMut(Change<'_, K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(
                watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o),
            ) => on_change(Change::Object(&o)),
            Ok(watcher::Event::InitDone) => on_change(Change::Synced),
            Ok(watcher::Event::Init) => {}
            Err(e) => debug!(error = %e, "{what} watch failed; retrying"),
        }
    }
}
