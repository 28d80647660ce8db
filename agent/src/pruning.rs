//! How a Work's round prunes: what the other Works list (an object one of them lists is
//! handed over, not pruned), and the prunes themselves, a few at a time.

use std::collections::HashMap;

use flotilla_api::work::{AppliedResourceMeta, ResourceIdentifier, Work};
use futures::{FutureExt, StreamExt, future::BoxFuture};
use kube::ResourceExt;
use tracing::warn;

use super::{State, apply::identify};

/// How many objects of one Work are removed at once (as many as a bundle applies).
const PRUNE_CONCURRENCY: usize = super::work::APPLY_CONCURRENCY;

/// An object's identity as [`super::plan::same_manifest`] compares it: group, kind, namespace, name.
type ObjectKey = (String, String, String, String);

fn object_key(id: &ResourceIdentifier) -> ObjectKey {
    let ResourceIdentifier {
        group,
        kind,
        namespace,
        name,
        ..
    } = id;
    (group.clone(), kind.clone(), namespace.clone(), name.clone())
}

/// The objects the namespace's other Works list (but those being orphaned), each with the
/// Work listing it: an object moved there (a bundle took over a legacy Work, or a chunk
/// took it from another) is handed over, not pruned. Read from the cache once per round
/// that prunes (per object, a round of many would read every Work as often).
struct Elsewhere(HashMap<ObjectKey, String>);

impl Elsewhere {
    /// What the Works other than `name` list; nothing read unless `needed`.
    fn of(state: &State, name: &str, needed: bool) -> Self {
        let works = if needed {
            state.works.state()
        } else {
            Vec::new()
        };
        Self::among(works.iter().map(|w| &**w), name)
    }

    /// What `works` but `name` list.
    fn among<'w>(works: impl Iterator<Item = &'w Work>, name: &str) -> Self {
        let listed = works
            .filter(|w| w.name_any() != name)
            .flat_map(|w| {
                let manifests = w.spec.workload.manifests.iter().enumerate();
                manifests
                    .filter(|(i, _)| !w.manifest_config(*i).is_some_and(|c| c.orphan))
                    .map(|(i, m)| (object_key(&identify(i, m)), w.name_any()))
            })
            .collect();
        Elsewhere(listed)
    }

    fn lists(&self, id: &ResourceIdentifier) -> bool {
        self.0.contains_key(&object_key(id))
    }

    /// Whether another Work now lists the object: it is that Work's to apply (or find up
    /// to date) and record, not this one's to prune; that Work is queued.
    fn handed_over(&self, state: &State, id: &ResourceIdentifier) -> bool {
        let other = self.0.get(&object_key(id));
        other.map(|o| state.queue.add(o.clone())).is_some()
    }
}

/// Prunes what the Work `name` applied and no longer lists (`gone`) and what it meant to
/// apply but never recorded (`unrecorded`) — but an object another Work lists now, handed
/// over to it (that Work is queued: it applies, or finds up to date, and records it);
/// `orphan`: unlabelled, not deleted. Returns the ones that failed, of each.
pub(super) async fn prune<'a>(
    state: &'a State,
    name: &'a str,
    gone: Vec<&'a AppliedResourceMeta>,
    unrecorded: Vec<&'a ResourceIdentifier>,
    orphan: bool,
) -> (Vec<&'a AppliedResourceMeta>, Vec<&'a ResourceIdentifier>) {
    let others = Elsewhere::of(state, name, !gone.is_empty() || !unrecorded.is_empty());
    let gone: Vec<Prune<'_, _>> = (gone.into_iter())
        .filter(|g| !others.handed_over(state, &g.identifier))
        .map(|g| (g, &g.identifier, state.member.prune(g, orphan).boxed()))
        .collect();
    let failed = each_at_once(name, gone).await;
    let unrecorded: Vec<Prune<'_, _>> = (unrecorded.into_iter())
        .filter(|id| !state.records.listed_elsewhere(name, id) && !others.lists(id))
        .map(|id| (id, id, state.member.prune_unrecorded(id, orphan).boxed()))
        .collect();
    (failed, each_at_once(name, unrecorded).await)
}

/// One prune to run: what it is for, the object it removes, the request.
type Prune<'a, T> = (
    &'a T,
    &'a ResourceIdentifier,
    BoxFuture<'a, Result<(), String>>,
);

/// Runs the prunes, [`PRUNE_CONCURRENCY`] at a time (as a bundle's manifests are applied);
/// what the failed ones were for, each failure logged with the object's name.
async fn each_at_once<'a, T: Sync>(name: &str, prunes: Vec<Prune<'a, T>>) -> Vec<&'a T> {
    let runs: Vec<BoxFuture<'_, Option<&'a T>>> = (prunes.into_iter())
        .map(|(item, id, run)| -> BoxFuture<'_, Option<&'a T>> {
            Box::pin(async move {
                let e = run.await.err()?;
                warn!(work = %name, object = %id.name, error = %e, "pruning failed");
                Some(item)
            })
        })
        .collect();
    futures::stream::iter(runs)
        .buffered(PRUNE_CONCURRENCY)
        .filter_map(|failed| async move { failed })
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::work::{ManifestConfig, WorkSpec};
    use serde_json::json;

    fn cm(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "demo"}})
    }

    fn work(name: &str, manifests: &[(&str, bool)]) -> Work {
        let mut w = Work::new(name, WorkSpec::default());
        for (i, (object, orphan)) in manifests.iter().enumerate() {
            let m = cm(object);
            w.spec.manifest_configs.push(ManifestConfig {
                identifier: identify(i, &m),
                orphan: *orphan,
                ..ManifestConfig::default()
            });
            w.spec.workload.manifests.push(m);
        }
        w
    }

    #[test]
    fn an_object_another_work_lists_is_handed_over_but_one_it_orphans_is_not() {
        let works = [
            work("chunk-1", &[("a", false), ("b", false)]),
            work("chunk-2", &[("b", false), ("c", true)]),
        ];
        let others = Elsewhere::among(works.iter(), "chunk-1");
        let id = |n: &str| identify(0, &cm(n));
        assert!(others.lists(&id("b")), "chunk-2 took b over");
        assert!(
            !others.lists(&id("a")),
            "a Work's own manifests are not elsewhere"
        );
        assert!(
            !others.lists(&id("c")),
            "being orphaned there: not kept there"
        );
        assert_eq!(
            others.0.get(&object_key(&id("b"))).map(String::as_str),
            Some("chunk-2")
        );
        let mut other_version = id("b");
        other_version.version = "v2".into();
        other_version.ordinal = 7;
        assert!(
            others.lists(&other_version),
            "the same object by another version"
        );
        assert!(Elsewhere::among(std::iter::empty(), "x").0.is_empty());
    }
}
