//! Works beside a type's own bundles: the manifests a Pull cluster needs that render no
//! federated object of the type — copies of the dependencies that follow a workload, a
//! canary Deployment. Each kind of them has its own Work type label (never a federated
//! type's: a `<plural>.<kind>.flotilla.io` group no API serves), so its bundles, their
//! names and the caches that read them never meet a federated type's, and its own
//! [`Bundler`] writes them under the same split rule. Started on first use, so a federation
//! without Pull clusters, or without these features, watches nothing more. It owns the
//! cache and the writer; what goes in the manifests is its callers'.

use std::{
    collections::{BTreeSet, HashMap},
    ops::ControlFlow,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use flotilla_api::work::{WORK_BUNDLE_NAMESPACE, Work, cluster_namespace, type_label};
use flotilla_multicluster::watch::{WatchParams, watch_into};
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, GroupVersionKind},
    runtime::reflector::{self, ObjectRef, Store},
};
use tokio::task::JoinHandle;

use super::{Key, bundles::Bundler};

/// How long a caller waits for a freshly started cache to list.
const READY_WAIT: Duration = Duration::from_secs(30);

/// What a change of one of these Works is news for (a requeue of the objects it names).
pub(crate) type OnChange = Arc<dyn Fn(&Work) + Send + Sync>;

/// One kind of side Works: its label, its cache and its writer, started on first use.
pub(crate) struct SideWorks {
    host: Client,
    target: ApiResource,
    collect_status: bool,
    on_change: OnChange,
    started: OnceLock<Started>,
}

struct Started {
    bundler: Arc<Bundler>,
    works: Store<Work>,
    /// The Works ever seen per group, so a lookup reads its group's few, not every Work
    /// (names only added: one gone is simply not in the cache any more).
    groups: Arc<Mutex<Groups>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Work names by (cluster namespace, bundle namespace).
type Groups = HashMap<(String, Option<String>), BTreeSet<String>>;

fn bundle_namespace(w: &Work) -> Option<String> {
    w.annotations().get(WORK_BUNDLE_NAMESPACE).cloned()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pseudo resource naming one kind of side Works: `plural` in group
/// `<qualifier>.flotilla.io` (never served; only names and labels come from it).
pub(crate) fn side_resource(qualifier: &str, kind: &str, plural: &str) -> ApiResource {
    let group = format!("{qualifier}.flotilla.io");
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", kind), plural)
}

impl SideWorks {
    /// Side Works named after `target`; `collect_status`: the agent reports the member
    /// objects' status; `on_change` hears of every change of one of them.
    pub(crate) fn new(
        host: Client,
        target: ApiResource,
        collect_status: bool,
        on_change: OnChange,
    ) -> Self {
        SideWorks {
            host,
            target,
            collect_status,
            on_change,
            started: OnceLock::new(),
        }
    }

    /// The writer, once the cache has listed (`None` while it has not, after a wait): a
    /// change queued before would be written over chunks not yet seen.
    pub(crate) async fn ready(&self) -> Option<&Bundler> {
        let started = self.started.get_or_init(|| self.start());
        let ready = tokio::time::timeout(READY_WAIT, started.works.wait_until_ready()).await;
        matches!(ready, Ok(Ok(()))).then_some(&*started.bundler)
    }

    /// The Work holding the manifest of `key` in `cluster` (being orphaned or not), and its
    /// ordinal (from the cache; `None` before the first use).
    pub(crate) fn find(&self, cluster: &str, key: &Key) -> Option<(Arc<Work>, usize)> {
        let started = self.started.get()?;
        let namespace = cluster_namespace(cluster);
        let group = (namespace.clone(), key.0.clone());
        let names = lock(&started.groups)
            .get(&group)
            .cloned()
            .unwrap_or_default();
        (names.iter())
            .filter_map(|name| started.works.get(&ObjectRef::new(name).within(&namespace)))
            .filter(|w| {
                w.is_bundle() && w.annotations().get(WORK_BUNDLE_NAMESPACE) == key.0.as_ref()
            })
            .find_map(|w| {
                let ordinal = (0..w.spec.manifest_configs.len()).find(|i| {
                    w.manifest_config(*i)
                        .is_some_and(|c| c.source_namespace == key.0 && c.source_name == key.1)
                })?;
                Some((w, ordinal))
            })
    }

    fn start(&self) -> Started {
        let writer = reflector::store::Writer::<Work>::default();
        let works = writer.as_reader();
        let bundler = Arc::new(Bundler::new(
            self.host.clone(),
            self.target.clone(),
            self.collect_status,
            works.clone(),
        ));
        let api: Api<Work> = Api::all(self.host.clone());
        let mut params = WatchParams::host("work").from_watch_cache();
        let label = type_label(&self.target.plural, &self.target.group);
        params.label_selector = Some(format!("{}={label}", flotilla_api::work::WORK_TYPE_LABEL));
        let on_change = self.on_change.clone();
        let groups: Arc<Mutex<Groups>> = Arc::default();
        let seen = groups.clone();
        let observer = bundler.clone();
        let watch = watch_into(
            api,
            writer,
            params,
            |_| {},
            move |c| {
                observer.observe(&c);
                let Some(w) = c.object() else {
                    return ControlFlow::Continue(());
                };
                let group = (w.namespace().unwrap_or_default(), bundle_namespace(w));
                lock(&seen).entry(group).or_default().insert(w.name_any());
                on_change(w);
                ControlFlow::Continue(())
            },
        );
        Started {
            tasks: vec![tokio::spawn(watch), tokio::spawn(bundler.clone().run())],
            bundler,
            works,
            groups,
        }
    }
}

impl Drop for SideWorks {
    fn drop(&mut self) {
        if let Some(s) = self.started.get() {
            s.tasks.iter().for_each(JoinHandle::abort);
        }
    }
}

/// The sources (federated keys) a Work's manifests render.
pub(crate) fn sources(work: &Work) -> impl Iterator<Item = Key> + '_ {
    (work.spec.manifest_configs.iter()).map(super::bundle_plan::source_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::work::bundle_name;

    #[test]
    fn side_works_are_named_and_labelled_apart_from_the_federated_types() {
        let deps = side_resource("dependencies", "ConfigMap", "configmaps");
        assert_eq!(
            type_label(&deps.plural, &deps.group),
            "configmaps.dependencies.flotilla.io"
        );
        assert_ne!(
            type_label(&deps.plural, &deps.group),
            type_label("configmaps", "")
        );
        let ours = bundle_name(&deps.plural, &deps.group, Some("demo"), 0);
        assert_ne!(ours, bundle_name("configmaps", "", Some("demo"), 0));
        assert!(ours.starts_with("configmaps-demo--bundle-0-"), "{ours}");
    }
}
