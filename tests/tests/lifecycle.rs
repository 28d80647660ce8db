//! Lifecycle end to end on real clusters: cross-cluster deletion (delete options, orphaning,
//! an object a member holds back), unready and unjoined members during deletion, adoption of
//! pre-existing objects, `kubefed.io/managed=false`, strays left while the control plane
//! was down, federated namespaces, and immutable fields.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use flotilla_controllers::{
    join::{JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};
use flotilla_crds::{DEFAULT_NAMESPACE, federated::FederatedStatus};
use flotilla_tests::{
    federation::{Federation, apply, federated, federated_namespace, federation},
    wait_for,
};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    batch::v1::Job,
    core::v1::{ConfigMap, Namespace},
    events::v1::Event,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::ApiResource,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);
const MANAGED: &str = "kubefed.io/managed";

/// A federated object of `kind` in namespace `ns`.
fn fed_obj(kind: &str, ns: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": format!("Federated{kind}"),
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": spec,
    })
}

fn fed_cm(name: &str, annotations: Value, data: Value) -> Value {
    fed_obj(
        "ConfigMap",
        "demo",
        name,
        annotations,
        json!({"template": {"data": data}, "placement": {"clusterSelector": {}}}),
    )
}

fn fed_deploy(name: &str, annotations: Value) -> Value {
    fed_obj(
        "Deployment",
        "demo",
        name,
        annotations,
        json!({
            "template": {"spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}
            }},
            "placement": {"clusterSelector": {}}
        }),
    )
}

fn cm_ar() -> ApiResource {
    federated("ConfigMap", "configmaps")
}

fn fed_api(client: &Client, ar: &ApiResource, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, ar)
}

fn cms(client: &Client, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), ns)
}

async fn status_of(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    name: &str,
) -> anyhow::Result<FederatedStatus> {
    Ok(FederatedStatus::from_dynamic(
        &fed_api(client, ar, ns).get(name).await?,
    ))
}

/// Per-cluster status reasons of a federated object, by cluster name.
async fn cluster_reasons(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let s = status_of(client, ar, ns, name).await?;
    Ok(s.clusters.into_iter().map(|c| (c.name, c.status)).collect())
}

async fn wait_propagated(
    fed: &Federation,
    ar: &ApiResource,
    ns: &str,
    name: &str,
) -> anyhow::Result<FederatedStatus> {
    wait_for(T, &format!("{ns}/{name} propagated"), || async {
        let s = status_of(&fed.host, ar, ns, name).await?;
        let ok = s.propagation().is_some_and(|c| c.status == "True");
        ensure!(ok, "status: {s:?}");
        Ok(s)
    })
    .await
}

async fn wait_gone(api: &Api<DynamicObject>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    wait_for(timeout, &format!("{name} gone from the host"), || async {
        ensure!(api.get_opt(name).await?.is_none(), "still there");
        Ok(())
    })
    .await
}

async fn delete(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// A federation with two members and namespace `demo` federated to both.
async fn ready_federation() -> anyhow::Result<Federation> {
    ready_federation_of(2).await
}

async fn ready_federation_of(members: usize) -> anyhow::Result<Federation> {
    let fed = federation(members).await?;
    federated_namespace(&fed, "demo").await?;
    for m in &fed.members {
        let ns: Api<Namespace> = Api::all(m.clone());
        wait_for(T, "namespace demo in member", || async {
            ensure!(ns.get_opt("demo").await?.is_some(), "missing");
            Ok(())
        })
        .await?;
    }
    Ok(fed)
}

fn control_plane(fed: &Federation) -> anyhow::Result<&ControlPlane> {
    fed.control_plane.as_ref().context("control plane stopped")
}

#[tokio::test]
async fn deleting_federated_objects_removes_member_objects_first_and_honours_delete_options_and_orphaning()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let cm = cm_ar();
    let dar = federated("Deployment", "deployments");
    let fcms = fed_api(&fed.host, &cm, "demo");
    let fdeps = fed_api(&fed.host, &dar, "demo");
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm("doomed", json!({}), json!({"k": "v"})),
    )
    .await?;
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm("held", json!({}), json!({"k": "v"})),
    )
    .await?;
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm(
            "orphaned",
            json!({"kubefed.io/orphan": "true"}),
            json!({"k": "v"}),
        ),
    )
    .await?;
    apply(&fed.host, &dar, Some("demo"), &fed_deploy("web", json!({}))).await?;
    apply(
        &fed.host,
        &dar,
        Some("demo"),
        &fed_deploy(
            "keep-rs",
            json!({"kubefed.io/deleteoption": "{\"propagationPolicy\":\"Orphan\"}"}),
        ),
    )
    .await?;
    for name in ["doomed", "held", "orphaned"] {
        wait_propagated(&fed, &cm, "demo", name).await?;
    }
    for name in ["web", "keep-rs"] {
        wait_propagated(&fed, &dar, "demo", name).await?;
    }
    // Every federated object carries the sync finalizer before anything is propagated.
    for o in fcms.list(&ListParams::default()).await? {
        assert!(
            o.finalizers()
                .iter()
                .any(|f| f == "kubefed.io/sync-controller"),
            "{} has no finalizer",
            o.name_any()
        );
    }
    // The members' controller-managers create the ReplicaSets.
    for m in &fed.members {
        let rs: Api<ReplicaSet> = Api::namespaced(m.clone(), "demo");
        wait_for(T, "keep-rs ReplicaSet in member", || async {
            let l = rs
                .list(&ListParams::default().labels("app=keep-rs"))
                .await?;
            ensure!(!l.items.is_empty(), "none yet");
            Ok(())
        })
        .await?;
    }
    // member1 holds its copy of `held` back with a finalizer of its own.
    cms(&fed.members[0], "demo")
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await?;

    for name in ["doomed", "held", "orphaned"] {
        delete(&fcms, name).await?;
    }
    for name in ["web", "keep-rs"] {
        delete(&fdeps, name).await?;
    }

    // Orphaning: the federated object goes at once; members keep unlabelled copies.
    wait_gone(&fcms, "orphaned", Duration::from_secs(5)).await?;
    for m in &fed.members {
        let live = cms(m, "demo")
            .get_opt("orphaned")
            .await?
            .context("orphaned object deleted from a member")?;
        assert_eq!(live.labels().get(MANAGED), None, "managed label kept");
        assert_eq!(
            live.data.unwrap_or_default().get("k").map(String::as_str),
            Some("v")
        );
    }

    // Plain deletion: when the federated object is gone, so are the member objects.
    wait_gone(&fcms, "doomed", T).await?;
    wait_gone(&fdeps, "web", T).await?;
    for m in &fed.members {
        assert!(cms(m, "demo").get_opt("doomed").await?.is_none());
        let d: Api<Deployment> = Api::namespaced(m.clone(), "demo");
        assert!(d.get_opt("web").await?.is_none());
    }

    // propagationPolicy Orphan: the Deployment goes, its ReplicaSet stays (un-owned).
    wait_gone(&fdeps, "keep-rs", T).await?;
    for m in &fed.members {
        let d: Api<Deployment> = Api::namespaced(m.clone(), "demo");
        assert!(d.get_opt("keep-rs").await?.is_none());
        let rs: Api<ReplicaSet> = Api::namespaced(m.clone(), "demo");
        wait_for(T, "keep-rs ReplicaSet orphaned", || async {
            let l = rs
                .list(&ListParams::default().labels("app=keep-rs"))
                .await?;
            ensure!(l.items.len() == 1, "ReplicaSets: {}", l.items.len());
            let owners = l.items[0].owner_references().len();
            ensure!(owners == 0, "still {owners} owner(s)");
            Ok(())
        })
        .await?;
    }

    // A member object that is slow to go keeps the federated object, WaitingForRemoval.
    wait_for(T, "held: member1 WaitingForRemoval", || async {
        let r = cluster_reasons(&fed.host, &cm, "demo", "held").await?;
        ensure!(
            r.get("member1").map(String::as_str) == Some("WaitingForRemoval"),
            "{r:?}"
        );
        ensure!(!r.contains_key("member2"), "member2 not removed yet: {r:?}");
        Ok(())
    })
    .await?;
    assert!(
        cms(&fed.members[1], "demo")
            .get_opt("held")
            .await?
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(fcms.get_opt("held").await?.is_some(), "went too early");
    cms(&fed.members[0], "demo")
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    wait_gone(&fcms, "held", T).await?;
    Ok(())
}

#[tokio::test]
async fn an_unready_member_holds_deletion_until_the_timeout_and_an_unjoined_member_not_at_all()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let cm = cm_ar();
    let fcms = fed_api(&fed.host, &cm, "demo");
    for name in ["a", "b"] {
        apply(
            &fed.host,
            &cm,
            Some("demo"),
            &fed_cm(name, json!({}), json!({"k": "v"})),
        )
        .await?;
        wait_propagated(&fed, &cm, "demo", name).await?;
    }
    let set = control_plane(&fed)?.clusters.clone();
    fed.env.stop_apiserver("member1").await?;
    wait_for(T, "member1 unready", || async {
        ensure!(set.ready().len() == 1, "still ready");
        Ok(())
    })
    .await?;

    let started = Instant::now();
    delete(&fcms, "a").await?;
    wait_for(Duration::from_secs(10), "a gone from member2", || async {
        ensure!(
            cms(&fed.members[1], "demo").get_opt("a").await?.is_none(),
            "present"
        );
        Ok(())
    })
    .await?;
    wait_for(T, "a: member1 ClusterNotReady", || async {
        let r = cluster_reasons(&fed.host, &cm, "demo", "a").await?;
        ensure!(
            r.get("member1").map(String::as_str) == Some("ClusterNotReady"),
            "{r:?}"
        );
        Ok(())
    })
    .await?;
    wait_gone(&fcms, "a", Duration::from_secs(45)).await?;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(15),
        "gave up on member1 after {waited:?}, before the 20s timeout"
    );
    let events: Api<Event> = Api::namespaced(fed.host.clone(), "demo");
    let incomplete: Vec<Event> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DeletionIncomplete"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("a"))
        .collect();
    assert_eq!(incomplete.len(), 1, "events: {incomplete:?}");
    let note = incomplete[0].note.clone().unwrap_or_default();
    assert!(note.contains("member1"), "event note: {note}");
    assert_eq!(incomplete[0].type_.as_deref(), Some("Warning"));

    // member1 returns: the copy left behind is a stray and is removed.
    fed.env.start_apiserver("member1").await?;
    wait_for(
        Duration::from_secs(60),
        "a removed from member1",
        || async {
            ensure!(
                cms(&fed.members[0], "demo").get_opt("a").await?.is_none(),
                "present"
            );
            Ok(())
        },
    )
    .await?;
    let m1_b = cms(&fed.members[0], "demo").get("b").await?;

    // member1 stops again and is unjoined: deletion does not wait for it.
    fed.env.stop_apiserver("member1").await?;
    let kfcs: Api<flotilla_crds::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.delete("member1", &DeleteParams::default()).await?;
    wait_for(T, "member1 unregistered", || async {
        ensure!(set.get("member1").is_none(), "still registered");
        Ok(())
    })
    .await?;
    let started = Instant::now();
    delete(&fcms, "b").await?;
    wait_gone(&fcms, "b", Duration::from_secs(10)).await?;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for an unjoined cluster"
    );
    assert!(cms(&fed.members[1], "demo").get_opt("b").await?.is_none());
    // The unjoined member keeps its copy: Flotilla no longer manages that cluster.
    fed.env.start_apiserver("member1").await?;
    let still = cms(&fed.members[0], "demo").get("b").await?;
    assert_eq!(still.uid(), m1_b.uid());
    Ok(())
}

#[tokio::test]
async fn pre_existing_objects_are_adopted_unless_disabled_and_managed_false_objects_are_never_touched()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let cm = cm_ar();
    let fcms = fed_api(&fed.host, &cm, "demo");
    let m1 = cms(&fed.members[0], "demo");
    let m2 = cms(&fed.members[1], "demo");
    let plain = |name: &str, labels: Value, data: Value| -> anyhow::Result<ConfigMap> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}, "data": data
        }))?)
    };
    // member1: an unlabelled object of the same name; member2: one marked managed=false.
    m1.create(
        &PostParams::default(),
        &plain("pre", json!({}), json!({"k": "old"}))?,
    )
    .await?;
    let hands_off = m2
        .create(
            &PostParams::default(),
            &plain("pre", json!({MANAGED: "false"}), json!({"k": "mine"}))?,
        )
        .await?;
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm("pre", json!({}), json!({"k": "new"})),
    )
    .await?;
    wait_for(T, "pre adopted in member1", || async {
        let live = m1.get("pre").await?;
        ensure!(
            live.labels().get(MANAGED).map(String::as_str) == Some("true"),
            "labels {:?}",
            live.labels()
        );
        let k = live.data.unwrap_or_default().get("k").cloned();
        ensure!(k.as_deref() == Some("new"), "data k = {k:?}");
        Ok(())
    })
    .await?;
    let status = wait_for(T, "member2 ManagedLabelFalse", || async {
        let s = status_of(&fed.host, &cm, "demo", "pre").await?;
        let r: BTreeMap<_, _> = s
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.status.clone()))
            .collect();
        ensure!(
            r.get("member2").map(String::as_str) == Some("ManagedLabelFalse")
                && r.get("member1").map(String::as_str) == Some(""),
            "{r:?}"
        );
        Ok(s)
    })
    .await?;
    assert_eq!(
        status.propagation().map(|c| c.reason.as_str()),
        Some("CheckClusters")
    );

    // adoptResources: Disabled — a pre-existing object is reported, not touched.
    let cfgs: Api<flotilla_crds::KubeFedConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    cfgs.patch(
        "kubefed",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"syncController": {"adoptResources": "Disabled"}}})),
    )
    .await?;
    // The registry follows the KubeFedConfig through a watch.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = m1
        .create(
            &PostParams::default(),
            &plain("pre2", json!({}), json!({"k": "old"}))?,
        )
        .await?;
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm("pre2", json!({}), json!({"k": "new"})),
    )
    .await?;
    wait_for(
        T,
        "pre2: member1 AlreadyExists, member2 created",
        || async {
            let r = cluster_reasons(&fed.host, &cm, "demo", "pre2").await?;
            ensure!(
                r.get("member1").map(String::as_str) == Some("AlreadyExists")
                    && r.get("member2").map(String::as_str) == Some(""),
                "{r:?}"
            );
            Ok(())
        },
    )
    .await?;
    assert!(m2.get_opt("pre2").await?.is_some());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        m1.get("pre2").await?.resource_version(),
        untouched.resource_version(),
        "a pre-existing object was modified with adoption disabled"
    );

    // Deleting the federated objects leaves the objects Flotilla does not manage.
    delete(&fcms, "pre").await?;
    delete(&fcms, "pre2").await?;
    wait_gone(&fcms, "pre", T).await?;
    wait_gone(&fcms, "pre2", T).await?;
    assert!(
        m1.get_opt("pre").await?.is_none(),
        "adopted object is managed"
    );
    assert!(m2.get_opt("pre2").await?.is_none());
    assert_eq!(
        m2.get("pre").await?.resource_version(),
        hands_off.resource_version(),
        "a managed=false object was modified"
    );
    assert_eq!(
        m1.get("pre2").await?.resource_version(),
        untouched.resource_version(),
        "an unadopted object was modified"
    );
    Ok(())
}

#[tokio::test]
async fn strays_left_while_the_control_plane_was_down_are_cleaned_up_and_a_restart_honours_deletions_in_progress()
-> anyhow::Result<()> {
    let mut fed = ready_federation().await?;
    let cm = cm_ar();
    let fcms = fed_api(&fed.host, &cm, "demo");
    for name in ["stray", "keep"] {
        apply(
            &fed.host,
            &cm,
            Some("demo"),
            &fed_cm(name, json!({}), json!({"k": "v"})),
        )
        .await?;
        wait_propagated(&fed, &cm, "demo", name).await?;
    }
    apply(
        &fed.host,
        &cm,
        Some("demo"),
        &fed_cm(
            "late",
            json!({"kubefed.io/orphan": "true"}),
            json!({"k": "v"}),
        ),
    )
    .await?;
    wait_propagated(&fed, &cm, "demo", "late").await?;
    let m1 = cms(&fed.members[0], "demo");
    let bystander = m1
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "bystander"}, "data": {"k": "v"}}),
            )?,
        )
        .await?;
    let hands_off = m1
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "hands-off", "labels": {MANAGED: "false"}}}),
            )?,
        )
        .await?;
    let mut keep_uids = Vec::new();
    for m in &fed.members {
        keep_uids.push(cms(m, "demo").get("keep").await?.uid());
    }

    fed.control_plane.take();
    delete(&fcms, "stray").await?;
    fcms.patch(
        "stray",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    wait_gone(&fcms, "stray", T).await?;
    for m in &fed.members {
        assert!(cms(m, "demo").get_opt("stray").await?.is_some());
    }
    // An orphaning deletion that began longer than the unready-cluster timeout (20 s)
    // before the restart, and member1 briefly away as the control plane starts: that
    // must not count as having waited for member1.
    delete(&fcms, "late").await?;
    tokio::time::sleep(Duration::from_secs(21)).await;
    fed.env.stop_apiserver("member1").await?;

    fed.control_plane = Some(ControlPlane::start(
        fed.host.clone(),
        DEFAULT_NAMESPACE,
        Arc::new(Metrics::new()),
    ));
    tokio::time::sleep(Duration::from_secs(4)).await;
    fed.env.start_apiserver("member1").await?;
    for m in &fed.members {
        wait_for(T, "stray cleaned up", || async {
            ensure!(cms(m, "demo").get_opt("stray").await?.is_none(), "present");
            Ok(())
        })
        .await?;
    }
    wait_gone(&fcms, "late", T).await?;
    for m in &fed.members {
        let live = cms(m, "demo")
            .get_opt("late")
            .await?
            .context("an orphaned object was deleted")?;
        assert_eq!(live.labels().get(MANAGED), None, "still labelled managed");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (m, uid) in fed.members.iter().zip(&keep_uids) {
        assert_eq!(
            &cms(m, "demo").get("keep").await?.uid(),
            uid,
            "a live federated object's member copy was recreated"
        );
    }
    assert_eq!(
        m1.get("bystander").await?.resource_version(),
        bystander.resource_version()
    );
    assert_eq!(
        m1.get("hands-off").await?.resource_version(),
        hands_off.resource_version()
    );
    Ok(())
}

#[tokio::test]
async fn namespace_placement_bounds_namespaced_objects_and_deleting_a_federated_namespace_removes_it_except_system_namespaces()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let nsar = federated("Namespace", "namespaces");
    let cm = cm_ar();
    let host_ns: Api<Namespace> = Api::all(fed.host.clone());
    for ns in ["solo", "plain"] {
        host_ns
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    // The host joins as a member too, as kubefed users often do.
    let mut opts = JoinOptions::new("host", fed.env.host().server());
    opts.ca_pem = Some(fed.env.host().ca_pem().to_string());
    join(&fed.host, &fed.host, &opts).await?;
    let set = control_plane(&fed)?.clusters.clone();
    wait_for(T, "the host Ready as a member", || async {
        ensure!(set.ready().len() == 3, "{} ready", set.ready().len());
        Ok(())
    })
    .await?;
    let solo_uid = host_ns.get("solo").await?.uid();
    // kubefed manifests often omit the template of a FederatedNamespace.
    apply(
        &fed.host,
        &nsar,
        Some("solo"),
        &fed_obj(
            "Namespace",
            "solo",
            "solo",
            json!({}),
            json!({"placement": {"clusters": [{"name": "member1"}, {"name": "host"}]}}),
        ),
    )
    .await?;
    // A FederatedNamespace named otherwise than its namespace is ignored.
    apply(
        &fed.host,
        &nsar,
        Some("solo"),
        &fed_obj(
            "Namespace",
            "solo",
            "misnamed",
            json!({}),
            json!({"placement": {"clusterSelector": {}}}),
        ),
    )
    .await?;
    let all = json!({"template": {"data": {"k": "v"}}, "placement": {"clusterSelector": {}}});
    apply(
        &fed.host,
        &cm,
        Some("solo"),
        &fed_obj("ConfigMap", "solo", "cfg", json!({}), all.clone()),
    )
    .await?;
    apply(
        &fed.host,
        &cm,
        Some("plain"),
        &fed_obj("ConfigMap", "plain", "lonely", json!({}), all),
    )
    .await?;
    let s = wait_propagated(&fed, &cm, "solo", "cfg").await?;
    assert_eq!(
        s.clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["host", "member1"]
    );
    let events: Api<Event> = Api::namespaced(fed.host.clone(), "solo");
    wait_for(T, "InvalidName event", || async {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("InvalidName")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("misnamed")
            });
        ensure!(found, "no event");
        Ok(())
    })
    .await?;
    let misnamed = fed_api(&fed.host, &nsar, "solo").get("misnamed").await?;
    assert!(
        misnamed.finalizers().is_empty(),
        "a misnamed object got a finalizer"
    );
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        assert!(nss.get_opt("misnamed").await?.is_none());
    }
    assert!(cms(&fed.members[0], "solo").get_opt("cfg").await?.is_some());
    let m2_ns: Api<Namespace> = Api::all(fed.members[1].clone());
    assert!(m2_ns.get_opt("solo").await?.is_none());
    wait_for(T, "lonely: NamespaceNotFederated", || async {
        let s = status_of(&fed.host, &cm, "plain", "lonely").await?;
        let c = s.propagation().context("no condition")?;
        ensure!(
            c.status == "False" && c.reason == "NamespaceNotFederated",
            "{c:?}"
        );
        Ok(())
    })
    .await?;
    for m in &fed.members {
        assert!(cms(m, "plain").get_opt("lonely").await?.is_none());
    }

    // System namespaces can be federated (labelled) but are never deleted.
    for ns in ["default", DEFAULT_NAMESPACE] {
        apply(
            &fed.host,
            &nsar,
            Some(ns),
            &fed_obj("Namespace", ns, ns, json!({}), json!({"template": {"metadata": {"labels": {"team": "core"}}}, "placement": {"clusterSelector": {}}})),
        )
        .await?;
        wait_propagated(&fed, &nsar, ns, ns).await?;
    }
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        let d = nss.get("default").await?;
        assert_eq!(d.labels().get("team").map(String::as_str), Some("core"));
    }

    let fns = |ns: &str| fed_api(&fed.host, &nsar, ns);
    for ns in ["solo", "default", DEFAULT_NAMESPACE] {
        delete(&fns(ns), ns).await?;
    }
    let m1_ns: Api<Namespace> = Api::all(fed.members[0].clone());
    wait_for(
        Duration::from_secs(60),
        "solo removed from member1",
        || async {
            ensure!(m1_ns.get_opt("solo").await?.is_none(), "present");
            Ok(())
        },
    )
    .await?;
    for ns in ["solo", "default", DEFAULT_NAMESPACE] {
        wait_gone(&fns(ns), ns, T).await?;
    }
    // In the host-as-member, namespace solo is the host's own: only unlabelled.
    let live = host_ns.get("solo").await?;
    assert_eq!(live.uid(), solo_uid);
    assert!(
        live.metadata.deletion_timestamp.is_none(),
        "host namespace deleted"
    );
    assert_eq!(live.labels().get(MANAGED), None);
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        for ns in ["default", DEFAULT_NAMESPACE] {
            let live = nss.get(ns).await?;
            assert!(
                live.metadata.deletion_timestamp.is_none(),
                "{ns} is being deleted in a member"
            );
            assert_eq!(live.labels().get(MANAGED), None, "{ns} still managed");
        }
    }
    // Without its FederatedNamespace, the ConfigMap is placed nowhere.
    wait_for(T, "cfg: NamespaceNotFederated", || async {
        let s = status_of(&fed.host, &cm, "solo", "cfg").await?;
        let c = s.propagation().context("no condition")?;
        ensure!(c.reason == "NamespaceNotFederated", "{c:?}");
        Ok(())
    })
    .await?;
    assert_eq!(set.ready().len(), 3, "a member lost its join namespace");
    Ok(())
}

#[tokio::test]
async fn an_immutable_field_change_fails_with_the_servers_message_or_recreates_when_annotated()
-> anyhow::Result<()> {
    let fed = ready_federation_of(1).await?;
    let jar = federated("Job", "jobs");
    let fjob = |image: &str, annotations: Value| {
        fed_obj(
            "Job",
            "demo",
            "once",
            annotations,
            json!({
                "template": {"spec": {"template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": image, "command": ["true"]}]
                }}}},
                "placement": {"clusterSelector": {}}
            }),
        )
    };
    apply(
        &fed.host,
        &jar,
        Some("demo"),
        &fjob("busybox:1.36", json!({})),
    )
    .await?;
    wait_propagated(&fed, &jar, "demo", "once").await?;
    let jobs: Api<Job> = Api::namespaced(fed.members[0].clone(), "demo");
    let first = jobs.get("once").await?;

    apply(
        &fed.host,
        &jar,
        Some("demo"),
        &fjob("busybox:1.37", json!({})),
    )
    .await?;
    let status = wait_for(T, "member1 UpdateFailed", || async {
        let s = status_of(&fed.host, &jar, "demo", "once").await?;
        let c = s
            .clusters
            .iter()
            .find(|c| c.name == "member1")
            .context("member1 not in status")?;
        ensure!(c.status == "UpdateFailed", "{s:?}");
        Ok(c.message.clone())
    })
    .await?;
    assert!(status.contains("field is immutable"), "message: {status}");
    assert_eq!(jobs.get("once").await?.uid(), first.uid());

    apply(
        &fed.host,
        &jar,
        Some("demo"),
        &fjob(
            "busybox:1.37",
            json!({"flotilla.io/recreate-on-immutable": "true"}),
        ),
    )
    .await?;
    wait_for(T, "job recreated with the new image", || async {
        let j = jobs.get_opt("once").await?.context("absent")?;
        ensure!(j.uid() != first.uid(), "same uid");
        let image = j
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.first().and_then(|c| c.image.clone()));
        ensure!(image.as_deref() == Some("busybox:1.37"), "image {image:?}");
        Ok(())
    })
    .await?;
    wait_propagated(&fed, &jar, "demo", "once").await?;
    Ok(())
}
