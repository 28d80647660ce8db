//! The library's watch loop (`flotilla_multicluster::watch`) against a real API server: an
//! object of a list — the first one, or a relist after the watch's resource version
//! expired — comes as `Change::Listed` while the store still holds what it held before,
//! and the store shows the list only at `Change::Synced`. A caller that took a listed object
//! for "the cache shows this now" would read the state before the list (the bundler's
//! stand-ins and the agent's own writes rely on this). Each list is announced before it is
//! requested (`Change::Listing`): the agent's own writes answered after that may be missing
//! from the list.

use std::{
    ops::ControlFlow,
    sync::{Arc, Mutex},
    time::Duration,
};

use flotilla_localenv::testkit::{TestClusters, wait_until};
use flotilla_multicluster::watch::{Change, WatchParams, watch_into};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::reflector::{self, ObjectRef, Store},
};
use serde_json::json;

const NS: &str = "default";

/// One callback: its kind, the object's `v` as the change carries it, and the object's `v`
/// as the store held it at that moment.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Object {
        listed: bool,
        v: String,
        stored: Option<String>,
    },
    Synced {
        stored: Option<String>,
    },
    Listing,
}

fn v_of(cm: &ConfigMap) -> String {
    (cm.data.as_ref().and_then(|d| d.get("v")).cloned()).unwrap_or_default()
}

fn stored_v(store: &Store<ConfigMap>) -> Option<String> {
    store
        .get(&ObjectRef::new("watched").within(NS))
        .map(|cm| v_of(&cm))
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn count(log: &Log, s: &Seen) -> usize {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    log.iter().filter(|e| *e == s).count()
}

/// Waits up to `secs` until the watch has seen `s` once.
async fn until_seen(log: &Log, s: Seen, secs: u64) -> anyhow::Result<()> {
    wait_until(
        Duration::from_secs(secs),
        "the watch's callbacks",
        || async {
            match count(log, &s) {
                1 => Ok(()),
                _ => Err(format!("waiting for {s:?} in {log:?}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// Whether every list's objects and end came after its start, and how many lists began.
fn lists_announced(log: &Log) -> Result<usize, String> {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let (mut listing, mut begun) = (false, 0);
    for (i, e) in log.iter().enumerate() {
        match e {
            Seen::Listing => (listing, begun) = (true, begun + 1),
            Seen::Object { listed: true, .. } if !listing => return Err(format!("#{i}: {log:?}")),
            Seen::Synced { .. } if !listing => return Err(format!("#{i}: {log:?}")),
            Seen::Synced { .. } => listing = false,
            Seen::Object { .. } => {}
        }
    }
    Ok(begun)
}

fn synced(stored: &str) -> Seen {
    Seen::Synced {
        stored: Some(stored.into()),
    }
}

fn object(listed: bool, v: &str, stored: &str) -> Seen {
    Seen::Object {
        listed,
        v: v.into(),
        stored: Some(stored.into()),
    }
}

async fn set_v(cms: &Api<ConfigMap>, v: &str) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"data": {"v": v}}));
    cms.patch("watched", &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_listed_object_is_in_the_store_only_once_the_list_ends() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start(1).await?;
    let direct: Api<ConfigMap> = Api::namespaced(kit.client("host").await?, NS);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("watched".into());
    cm.data = Some([("v".to_owned(), "1".to_owned())].into());
    direct.create(&PostParams::default(), &cm).await?;

    // The watch goes through the cluster's fault proxy; the test's writes do not.
    let proxied = Client::try_from(kit.proxied_config("host")?)?;
    let writer = reflector::store::Writer::<ConfigMap>::default();
    let store = writer.as_reader();
    let seen: Log = Arc::default();
    let (log, reader) = (seen.clone(), store.clone());
    let watch = tokio::spawn(watch_into(
        Api::<ConfigMap>::namespaced(proxied, NS),
        writer,
        WatchParams::host("test"),
        |_| {},
        move |c| {
            let stored = stored_v(&reader);
            let entry = match c {
                Change::Synced => Seen::Synced { stored },
                Change::Listing => Seen::Listing,
                Change::Object(o) | Change::Listed(o) if o.name_any() == "watched" => {
                    let listed = matches!(c, Change::Listed(_));
                    let v = v_of(o);
                    Seen::Object { listed, v, stored }
                }
                _ => return ControlFlow::Continue(()),
            };
            log.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            ControlFlow::Continue(())
        },
    ));
    until_seen(&seen, synced("1"), 30).await?;
    // The first list: the object came as listed, while the store was still empty.
    let listed_first = Seen::Object {
        listed: true,
        v: "1".into(),
        stored: None,
    };
    assert_eq!(count(&seen, &listed_first), 1, "{seen:?}");

    // An event: the store already holds the change.
    set_v(&direct, "2").await?;
    until_seen(&seen, object(false, "2", "2"), 30).await?;

    // A relist: the watch is cut off, the API server restarts (its new watch cache does
    // not hold the resource version the watch resumes from), and the object changes
    // before the watch is back.
    kit.black_hole("host");
    kit.stop_apiserver("host").await?;
    kit.start_apiserver("host").await?;
    set_v(&direct, "3").await?;
    kit.heal("host");
    until_seen(&seen, synced("3"), 90).await?;
    assert_eq!(count(&seen, &object(true, "3", "2")), 1, "{seen:?}");
    assert_eq!(count(&seen, &object(true, "3", "3")), 0, "{seen:?}");
    let lists = lists_announced(&seen).map_err(anyhow::Error::msg)?;
    assert!(lists >= 2, "the first list and the relist: {seen:?}");

    watch.abort();
    kit.shutdown().await?;
    Ok(())
}
