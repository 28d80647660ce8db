//! Lifecycle end to end on real clusters: cross-cluster deletion (delete options, orphaning,
//! an object a member holds back), unready and unjoined members during deletion (an
//! orphaning deletion that gave up on an unready member keeps its copy there), adoption of
//! pre-existing objects, `kubefed.io/managed=false`, strays left while the control plane
//! was down, federated namespaces, and immutable fields.

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_controllers::{
    join::{JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};
use flotilla_tests::{
    assert::{MANAGED, assert_unchanged, assert_unmanaged, events_about},
    federation::{Federation, federation},
    host::{FederatedRef, cluster_names, cluster_status},
    member::{config_maps, data_is, data_value, deployments},
    objects::{FederatedObject, config_map, create_namespace},
    scenario,
    scenarios::{run_all, run_concurrently},
    setup::federation_with_namespace,
    wait::{wait_absent, wait_object},
    wait_for,
};
use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    batch::v1::Job,
    core::v1::{ConfigMap, Namespace},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);

/// A federation with two members and namespace `demo` federated to both.
async fn ready_federation() -> anyhow::Result<Federation> {
    federation_with_namespace(2, "demo").await
}

/// FederatedConfigMap `demo/name` with data `k: v`, placed everywhere.
fn kv(name: &str) -> FederatedObject {
    FederatedObject::config_map("demo", name, json!({"k": "v"}))
}

fn control_plane(fed: &Federation) -> anyhow::Result<&ControlPlane> {
    fed.control_plane.as_ref().context("control plane stopped")
}

/// Sets (or with `null`, clears) the finalizers of ConfigMap `demo/name` in a cluster.
async fn set_finalizers(client: &Client, name: &str, finalizers: Value) -> anyhow::Result<()> {
    config_maps(client, "demo")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    Ok(())
}

async fn keep_rs_replica_sets(client: &Client) -> anyhow::Result<Vec<ReplicaSet>> {
    let rs: Api<ReplicaSet> = Api::namespaced(client.clone(), "demo");
    Ok(rs
        .list(&ListParams::default().labels("app=keep-rs"))
        .await?
        .items)
}

/// The federated objects of the deletion test, each propagated.
struct DeletionCases {
    doomed: FederatedRef,
    held: FederatedRef,
    orphaned: FederatedRef,
    web: FederatedRef,
    keep_rs: FederatedRef,
}

impl DeletionCases {
    fn all(&self) -> [&FederatedRef; 5] {
        [
            &self.doomed,
            &self.held,
            &self.orphaned,
            &self.web,
            &self.keep_rs,
        ]
    }
}

async fn propagate_deletion_cases(fed: &Federation) -> anyhow::Result<DeletionCases> {
    let host = &fed.host;
    let cases = DeletionCases {
        doomed: kv("doomed").apply(host).await?,
        held: kv("held").apply(host).await?,
        orphaned: kv("orphaned")
            .annotate("kubefed.io/orphan", "true")
            .apply(host)
            .await?,
        web: FederatedObject::deployment("demo", "web", 1, "nginx:1.25")
            .apply(host)
            .await?,
        keep_rs: FederatedObject::deployment("demo", "keep-rs", 1, "nginx:1.25")
            .annotate(
                "kubefed.io/deleteoption",
                "{\"propagationPolicy\":\"Orphan\"}",
            )
            .apply(host)
            .await?,
    };
    for f in cases.all() {
        f.wait_propagated().await?;
    }
    // Every federated object carries the sync finalizer before anything is propagated.
    for o in cases.doomed.api.list(&ListParams::default()).await? {
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
        wait_for(T, "keep-rs ReplicaSet in member", || async {
            ensure!(!keep_rs_replica_sets(m).await?.is_empty(), "none yet");
            Ok(())
        })
        .await?;
    }
    Ok(cases)
}

/// Orphaning: the federated object goes at once; members keep unlabelled copies.
async fn orphaned_copies_are_kept(fed: &Federation, orphaned: &FederatedRef) -> anyhow::Result<()> {
    orphaned.wait_gone(Duration::from_secs(5)).await?;
    for m in &fed.members {
        let live = config_maps(m, "demo")
            .get_opt("orphaned")
            .await?
            .context("orphaned object deleted from a member")?;
        assert_unmanaged(&live, "orphaned");
        assert_eq!(data_value(&live, "k"), Some("v"));
    }
    Ok(())
}

/// propagationPolicy Orphan: the Deployment goes, its ReplicaSet stays (un-owned).
async fn replica_sets_outlive_their_deployment(
    fed: &Federation,
    keep_rs: &FederatedRef,
) -> anyhow::Result<()> {
    keep_rs.wait_gone(T).await?;
    for m in &fed.members {
        assert!(deployments(m, "demo").get_opt("keep-rs").await?.is_none());
        wait_for(T, "keep-rs ReplicaSet orphaned", || async {
            let l = keep_rs_replica_sets(m).await?;
            ensure!(l.len() == 1, "ReplicaSets: {}", l.len());
            let owners = l[0].owner_references().len();
            ensure!(owners == 0, "still {owners} owner(s)");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// A member object that is slow to go keeps the federated object, WaitingForRemoval.
async fn a_held_member_object_delays_deletion(
    fed: &Federation,
    held: &FederatedRef,
) -> anyhow::Result<()> {
    wait_for(T, "held: member1 WaitingForRemoval", || async {
        let r = held.cluster_reasons().await?;
        ensure!(
            r.get("member1").map(String::as_str) == Some("WaitingForRemoval"),
            "{r:?}"
        );
        ensure!(!r.contains_key("member2"), "member2 not removed yet: {r:?}");
        Ok(())
    })
    .await?;
    assert!(
        config_maps(&fed.members[1], "demo")
            .get_opt("held")
            .await?
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(held.api.get_opt("held").await?.is_some(), "went too early");
    set_finalizers(&fed.members[0], "held", Value::Null).await?;
    held.wait_gone(T).await
}

/// Deletion, adoption and immutable fields share one federation, each in its own
/// namespace; the adoption scenario turns adoption off, which the other two never rely on
/// (they create no member object ahead of Flotilla). Federated namespaces come after them,
/// with adoption on again: that scenario joins the host as a member (every federated object
/// would then be placed there too) and needs the members' system namespaces adopted. The
/// unready-member and strays scenarios stop a member or the control plane and keep a
/// federation of their own.
#[tokio::test]
async fn deletion_adoption_immutable_fields_and_federated_namespaces_on_one_federation()
-> anyhow::Result<()> {
    let fed = federation(2).await?;
    let fed = &fed;
    run_all(
        fed,
        vec![
            scenario!(fed, "demo" => deleting_federated_objects_removes_member_objects_first_and_honours_delete_options_and_orphaning),
            scenario!(
                fed,
                "adopt",
                pre_existing_objects_are_adopted_unless_disabled_and_managed_false_objects_are_never_touched
            ),
            scenario!(
                fed,
                "immutable",
                an_immutable_field_change_fails_with_the_servers_message_or_recreates_when_annotated
            ),
        ],
    )
    .await;
    set_adoption(fed, "Enabled").await?;
    run_concurrently(vec![scenario!(
        namespace_placement_bounds_namespaced_objects_and_deleting_a_federated_namespace_removes_it_except_system_namespaces(fed)
    )])
    .await;
    Ok(())
}

/// Sets the KubeFedConfig's `adoptResources` and gives the registry, which follows it
/// through a watch, time to see it.
async fn set_adoption(fed: &Federation, mode: &str) -> anyhow::Result<()> {
    patch_sync_controller(fed, json!({"adoptResources": mode})).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

/// Merges `fields` into the KubeFedConfig's `spec.syncController`.
async fn patch_sync_controller(fed: &Federation, fields: Value) -> anyhow::Result<()> {
    let cfgs: Api<flotilla_api::KubeFedConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    cfgs.patch(
        flotilla_api::KUBEFED_CONFIG_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"syncController": fields}})),
    )
    .await?;
    Ok(())
}

/// In namespace `demo`, as every helper of this file.
async fn deleting_federated_objects_removes_member_objects_first_and_honours_delete_options_and_orphaning(
    fed: &Federation,
) -> anyhow::Result<()> {
    let cases = propagate_deletion_cases(fed).await?;
    // member1 holds its copy of `held` back with a finalizer of its own.
    set_finalizers(&fed.members[0], "held", json!(["example.com/hold"])).await?;
    for f in cases.all() {
        f.delete().await?;
    }

    orphaned_copies_are_kept(fed, &cases.orphaned).await?;

    // Plain deletion: when the federated object is gone, so are the member objects.
    cases.doomed.wait_gone(T).await?;
    cases.web.wait_gone(T).await?;
    for m in &fed.members {
        assert!(config_maps(m, "demo").get_opt("doomed").await?.is_none());
        assert!(deployments(m, "demo").get_opt("web").await?.is_none());
    }

    replica_sets_outlive_their_deployment(fed, &cases.keep_rs).await?;
    a_held_member_object_delays_deletion(fed, &cases.held).await?;
    Ok(())
}

/// `a` is deleted while member1 is down: deletion waits for the unready-cluster timeout
/// and then says so in one Warning Event.
async fn deletion_waits_for_an_unready_member_until_the_timeout(
    fed: &Federation,
    a: &FederatedRef,
) -> anyhow::Result<()> {
    a.delete().await?;
    let m2 = config_maps(&fed.members[1], "demo");
    wait_absent(Duration::from_secs(10), &m2, "a").await?;
    a.wait_cluster_reasons(&[("member1", "ClusterNotReady")])
        .await?;
    // Waiting, not given up: the object still holds its finalizer, nothing announced yet.
    let early = events_about(&fed.host, "demo", "a", "DeletionIncomplete").await?;
    assert!(early.is_empty(), "gave up on member1 at once: {early:?}");
    a.wait_gone(Duration::from_secs(45)).await?;
    let incomplete = events_about(&fed.host, "demo", "a", "DeletionIncomplete").await?;
    assert_eq!(incomplete.len(), 1, "events: {incomplete:?}");
    let note = incomplete[0].note.clone().unwrap_or_default();
    assert!(note.contains("member1"), "event note: {note}");
    assert_eq!(incomplete[0].type_.as_deref(), Some("Warning"));
    Ok(())
}

/// The orphaning deletion of `kept` gave up on member1 while it was down; now that it is
/// back, its copy is kept and only unlabelled — not deleted as a stray, as `a`'s copy is.
async fn an_orphaned_copy_outlives_the_outage(
    fed: &Federation,
    kept: &FederatedRef,
) -> anyhow::Result<()> {
    kept.wait_gone(Duration::from_secs(45)).await?;
    let incomplete = events_about(&fed.host, "demo", "kept", "DeletionIncomplete").await?;
    let note = incomplete
        .first()
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    ensure!(
        note.contains("kept and only unlabelled"),
        "event note: {note:?}"
    );
    Ok(())
}

async fn the_orphaned_copy_is_unlabelled_not_deleted(fed: &Federation) -> anyhow::Result<()> {
    let m1 = config_maps(&fed.members[0], "demo");
    let live = wait_object(Duration::from_secs(60), &m1, "kept", |cm| {
        ensure!(!cm.labels().contains_key(MANAGED), "still managed");
        Ok(())
    })
    .await
    .context("the orphaned copy in member1 was deleted or never unlabelled")?;
    assert_eq!(data_value(&live, "k"), Some("v"));
    // Unmanaged now: nothing deletes it later either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_unchanged(&m1, &live, "the orphaned copy after the outage").await
}

#[tokio::test]
async fn an_unready_member_holds_deletion_until_the_timeout_keeps_orphaned_copies_and_an_unjoined_member_not_at_all()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let a = kv("a").apply(&fed.host).await?;
    a.wait_propagated().await?;
    let b = kv("b").apply(&fed.host).await?;
    b.wait_propagated().await?;
    let kept = kv("kept")
        .annotate("kubefed.io/orphan", "true")
        .apply(&fed.host)
        .await?;
    kept.wait_propagated().await?;
    let set = control_plane(&fed)?.clusters.clone();
    fed.env.stop_apiserver("member1").await?;
    wait_for(T, "member1 unready", || async {
        ensure!(set.ready().len() == 1, "still ready");
        Ok(())
    })
    .await?;
    kept.delete().await?;
    deletion_waits_for_an_unready_member_until_the_timeout(&fed, &a).await?;
    an_orphaned_copy_outlives_the_outage(&fed, &kept).await?;

    // member1 returns: the copy left behind is a stray and is removed; the orphaned one stays.
    fed.env.start_apiserver("member1").await?;
    let m1 = config_maps(&fed.members[0], "demo");
    wait_absent(Duration::from_secs(60), &m1, "a").await?;
    the_orphaned_copy_is_unlabelled_not_deleted(&fed).await?;
    let m1_b = m1.get("b").await?;

    // member1 stops again and is unjoined: deletion does not wait for it.
    fed.env.stop_apiserver("member1").await?;
    let kfcs: Api<flotilla_api::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.delete("member1", &DeleteParams::default()).await?;
    wait_for(T, "member1 unregistered", || async {
        ensure!(set.get("member1").is_none(), "still registered");
        Ok(())
    })
    .await?;
    b.delete().await?;
    b.wait_gone(Duration::from_secs(10)).await?;
    // Not waited for: no unready-cluster timeout was reached.
    let timed_out = events_about(&fed.host, "demo", "b", "DeletionIncomplete").await?;
    assert!(
        timed_out.is_empty(),
        "waited for an unjoined cluster: {timed_out:?}"
    );
    assert!(
        config_maps(&fed.members[1], "demo")
            .get_opt("b")
            .await?
            .is_none()
    );
    // The unjoined member keeps its copy: Flotilla no longer manages that cluster.
    fed.env.start_apiserver("member1").await?;
    assert_eq!(m1.get("b").await?.uid(), m1_b.uid());
    Ok(())
}

/// Creates plain ConfigMap `name` through `api` (a cluster and namespace), data `k: <value>`.
async fn create_plain(
    api: &Api<ConfigMap>,
    name: &str,
    labels: &[(&str, &str)],
    value: &str,
) -> anyhow::Result<ConfigMap> {
    Ok(api
        .create(
            &PostParams::default(),
            &config_map(name, labels, &[("k", value)]),
        )
        .await?)
}

/// With `adoptResources: Disabled`, a pre-existing object is reported, not touched.
/// Returns the federated object and the untouched member object.
async fn adoption_disabled_leaves_pre2_alone(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<(FederatedRef, ConfigMap)> {
    let (m1, m2) = (
        config_maps(&fed.members[0], ns),
        config_maps(&fed.members[1], ns),
    );
    set_adoption(fed, "Disabled").await?;
    let untouched = create_plain(&m1, "pre2", &[], "old").await?;
    let pre2 = FederatedObject::config_map(ns, "pre2", json!({"k": "new"}))
        .apply(&fed.host)
        .await?;
    pre2.wait_cluster_reasons(&[("member1", "AlreadyExists"), ("member2", "")])
        .await?;
    assert!(m2.get_opt("pre2").await?.is_some());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_unchanged(
        &m1,
        &untouched,
        "a pre-existing object with adoption disabled",
    )
    .await?;
    Ok((pre2, untouched))
}

async fn pre_existing_objects_are_adopted_unless_disabled_and_managed_false_objects_are_never_touched(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let (m1, m2) = (
        config_maps(&fed.members[0], ns),
        config_maps(&fed.members[1], ns),
    );
    // member1: an unlabelled object of the same name; member2: one marked managed=false.
    create_plain(&m1, "pre", &[], "old").await?;
    let hands_off = create_plain(&m2, "pre", &[(MANAGED, "false")], "mine").await?;
    let pre = FederatedObject::config_map(ns, "pre", json!({"k": "new"}))
        .apply(&fed.host)
        .await?;
    wait_object(T, &m1, "pre", |live| {
        ensure!(
            live.labels().get(MANAGED).map(String::as_str) == Some("true"),
            "labels {:?}",
            live.labels()
        );
        data_is("k", "new")(live)
    })
    .await?;
    let status = pre
        .wait_cluster_reasons(&[("member2", "ManagedLabelFalse"), ("member1", "")])
        .await?;
    assert_eq!(
        status.propagation().map(|c| c.reason.as_str()),
        Some("CheckClusters")
    );

    let (pre2, untouched) = adoption_disabled_leaves_pre2_alone(fed, ns).await?;

    // Deleting the federated objects leaves the objects Flotilla does not manage.
    pre.delete().await?;
    pre2.delete().await?;
    pre.wait_gone(T).await?;
    pre2.wait_gone(T).await?;
    assert!(
        m1.get_opt("pre").await?.is_none(),
        "adopted object is managed"
    );
    assert!(m2.get_opt("pre2").await?.is_none());
    assert_unchanged(&m2, &hands_off, "a managed=false object").await?;
    assert_unchanged(&m1, &untouched, "an unadopted object").await?;
    Ok(())
}

/// Objects in member1 Flotilla must leave alone: one it never managed and one labelled
/// `managed=false`.
async fn create_bystanders(m1: &Api<ConfigMap>) -> anyhow::Result<[ConfigMap; 2]> {
    Ok([
        create_plain(m1, "bystander", &[], "v").await?,
        m1.create(
            &PostParams::default(),
            &config_map("hands-off", &[(MANAGED, "false")], &[]),
        )
        .await?,
    ])
}

/// The unready-cluster deletion timeout of the strays test: member1, stopped as the
/// control plane starts, must be back and seen Ready within it. Twice the tests' usual 20 s,
/// so that a restart slowed by the tests running beside it stays inside.
const STRAYS_DELETION_TIMEOUT: Duration = Duration::from_secs(40);

/// With the control plane stopped, `stray` is deleted without its finalizer (its member
/// copies stay behind), the unready-cluster timeout becomes [`STRAYS_DELETION_TIMEOUT`] and
/// an orphaning deletion of `late` starts more than that timeout before the restart.
async fn delete_while_the_control_plane_is_down(
    fed: &mut Federation,
    stray: &FederatedRef,
    late: &FederatedRef,
) -> anyhow::Result<()> {
    fed.control_plane.take();
    stray.delete().await?;
    stray
        .api
        .patch(
            "stray",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    stray.wait_gone(T).await?;
    for m in &fed.members {
        assert!(config_maps(m, "demo").get_opt("stray").await?.is_some());
    }
    let timeout = format!("{}s", STRAYS_DELETION_TIMEOUT.as_secs());
    patch_sync_controller(fed, json!({"unreadyClusterDeletionTimeout": timeout})).await?;
    late.delete().await?;
    tokio::time::sleep(STRAYS_DELETION_TIMEOUT + Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn strays_left_while_the_control_plane_was_down_are_cleaned_up_and_a_restart_honours_deletions_in_progress()
-> anyhow::Result<()> {
    let mut fed = ready_federation().await?;
    let stray = kv("stray").apply(&fed.host).await?;
    stray.wait_propagated().await?;
    kv("keep").apply(&fed.host).await?.wait_propagated().await?;
    let late = kv("late")
        .annotate("kubefed.io/orphan", "true")
        .apply(&fed.host)
        .await?;
    late.wait_propagated().await?;
    let m1 = config_maps(&fed.members[0], "demo");
    let bystanders = create_bystanders(&m1).await?;
    let mut keep_uids = Vec::new();
    for m in &fed.members {
        keep_uids.push(config_maps(m, "demo").get("keep").await?.uid());
    }

    delete_while_the_control_plane_is_down(&mut fed, &stray, &late).await?;
    // member1 briefly away as the control plane starts: that must not count as having
    // waited for member1.
    fed.env.stop_apiserver("member1").await?;
    fed.control_plane = Some(ControlPlane::start(
        fed.host.clone(),
        DEFAULT_NAMESPACE,
        Arc::new(Metrics::new()),
    ));
    tokio::time::sleep(Duration::from_secs(4)).await;
    fed.env.start_apiserver("member1").await?;
    for m in &fed.members {
        wait_absent(T, &config_maps(m, "demo"), "stray").await?;
    }
    late.wait_gone(T).await?;
    for m in &fed.members {
        let live = config_maps(m, "demo")
            .get_opt("late")
            .await?
            .context("an orphaned object was deleted")?;
        assert_unmanaged(&live, "late");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (m, uid) in fed.members.iter().zip(&keep_uids) {
        assert_eq!(
            &config_maps(m, "demo").get("keep").await?.uid(),
            uid,
            "a live federated object's member copy was recreated"
        );
    }
    for bystander in &bystanders {
        assert_unchanged(&m1, bystander, "an unmanaged object").await?;
    }
    Ok(())
}

/// Joins the host as a member too, as kubefed users often do, and waits until it is Ready.
async fn join_the_host_as_a_member(fed: &Federation) -> anyhow::Result<()> {
    let mut opts = JoinOptions::new("host", fed.env.host().server());
    opts.ca_pem = Some(fed.env.host().ca_pem().to_string());
    join(&fed.host, &fed.host, &opts).await?;
    let set = control_plane(fed)?.clusters.clone();
    wait_for(T, "the host Ready as a member", || async {
        ensure!(set.ready().len() == 3, "{} ready", set.ready().len());
        Ok(())
    })
    .await
}

/// FederatedNamespace `solo` places its namespace in member1 and the host; a ConfigMap in
/// it follows, one in an unfederated namespace goes nowhere, and a misnamed
/// FederatedNamespace is refused with an Event.
async fn namespace_placement_bounds_its_objects(fed: &Federation) -> anyhow::Result<()> {
    FederatedObject::namespace("solo")
        .on_clusters(&["member1", "host"])
        .apply(&fed.host)
        .await?;
    let misnamed = FederatedObject::new("Namespace", "namespaces", "solo", "misnamed")
        .apply(&fed.host)
        .await?;
    let cfg = FederatedObject::config_map("solo", "cfg", json!({"k": "v"}))
        .apply(&fed.host)
        .await?;
    let lonely = FederatedObject::config_map("plain", "lonely", json!({"k": "v"}))
        .apply(&fed.host)
        .await?;
    let s = cfg.wait_propagated().await?;
    assert_eq!(cluster_names(&s), vec!["host", "member1"]);
    wait_for(T, "InvalidName event", || async {
        let events = events_about(&fed.host, "solo", "misnamed", "InvalidName").await?;
        ensure!(!events.is_empty(), "no event");
        Ok(())
    })
    .await?;
    assert!(
        misnamed.get().await?.finalizers().is_empty(),
        "a misnamed object got a finalizer"
    );
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        assert!(nss.get_opt("misnamed").await?.is_none());
    }
    assert!(
        config_maps(&fed.members[0], "solo")
            .get_opt("cfg")
            .await?
            .is_some()
    );
    let m2_ns: Api<Namespace> = Api::all(fed.members[1].clone());
    assert!(m2_ns.get_opt("solo").await?.is_none());
    lonely.wait_not_propagated("NamespaceNotFederated").await?;
    for m in &fed.members {
        assert!(config_maps(m, "plain").get_opt("lonely").await?.is_none());
    }
    Ok(())
}

/// System namespaces can be federated (labelled) but are never deleted.
async fn system_namespaces_are_labelled(fed: &Federation) -> anyhow::Result<()> {
    for ns in ["default", DEFAULT_NAMESPACE] {
        FederatedObject::namespace(ns)
            .template(json!({"metadata": {"labels": {"team": "core"}}}))
            .apply(&fed.host)
            .await?
            .wait_propagated()
            .await?;
    }
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        let d = nss.get("default").await?;
        assert_eq!(d.labels().get("team").map(String::as_str), Some("core"));
    }
    Ok(())
}

/// After their FederatedNamespaces are deleted: `solo` is gone from member1, kept (only
/// unlabelled) in the host, and the system namespaces are kept unlabelled everywhere.
async fn only_member_namespaces_are_deleted(
    fed: &Federation,
    solo_uid: Option<String>,
) -> anyhow::Result<()> {
    let m1_ns: Api<Namespace> = Api::all(fed.members[0].clone());
    wait_absent(Duration::from_secs(60), &m1_ns, "solo").await?;
    for ns in ["solo", "default", DEFAULT_NAMESPACE] {
        FederatedObject::namespace(ns)
            .in_host(&fed.host)
            .wait_gone(T)
            .await?;
    }
    // In the host-as-member, namespace solo is the host's own: only unlabelled.
    let live = Api::<Namespace>::all(fed.host.clone()).get("solo").await?;
    assert_eq!(live.uid(), solo_uid);
    assert!(
        live.metadata.deletion_timestamp.is_none(),
        "host namespace deleted"
    );
    assert_unmanaged(&live, "host namespace solo");
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        for ns in ["default", DEFAULT_NAMESPACE] {
            let live = nss.get(ns).await?;
            assert!(
                live.metadata.deletion_timestamp.is_none(),
                "{ns} is being deleted in a member"
            );
            assert_unmanaged(&live, ns);
        }
    }
    Ok(())
}

async fn namespace_placement_bounds_namespaced_objects_and_deleting_a_federated_namespace_removes_it_except_system_namespaces(
    fed: &Federation,
) -> anyhow::Result<()> {
    for ns in ["solo", "plain"] {
        create_namespace(&fed.host, ns).await?;
    }
    join_the_host_as_a_member(fed).await?;
    let solo_uid = Api::<Namespace>::all(fed.host.clone())
        .get("solo")
        .await?
        .uid();
    namespace_placement_bounds_its_objects(fed).await?;
    system_namespaces_are_labelled(fed).await?;

    for ns in ["solo", "default", DEFAULT_NAMESPACE] {
        FederatedObject::namespace(ns)
            .in_host(&fed.host)
            .delete()
            .await?;
    }
    only_member_namespaces_are_deleted(fed, solo_uid).await?;
    // Without its FederatedNamespace, the ConfigMap is placed nowhere.
    FederatedObject::config_map("solo", "cfg", json!({}))
        .in_host(&fed.host)
        .wait_not_propagated("NamespaceNotFederated")
        .await?;
    let set = control_plane(fed)?.clusters.clone();
    assert_eq!(set.ready().len(), 3, "a member lost its join namespace");
    Ok(())
}

/// FederatedJob `once` in `ns`, one container running `image`.
fn once(ns: &str, image: &str) -> FederatedObject {
    FederatedObject::new("Job", "jobs", ns, "once").template(json!({"spec": {"template": {"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": image, "command": ["true"]}]
    }}}}))
}

async fn an_immutable_field_change_fails_with_the_servers_message_or_recreates_when_annotated(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let fonce = once(ns, "busybox:1.36").apply(&fed.host).await?;
    fonce.wait_propagated().await?;
    let jobs: Api<Job> = Api::namespaced(fed.members[0].clone(), ns);
    let first = jobs.get("once").await?;

    once(ns, "busybox:1.37").apply(&fed.host).await?;
    let status = fonce
        .wait_cluster_reasons(&[("member1", "UpdateFailed")])
        .await?;
    let message = &cluster_status(&status, "member1")
        .context("member1")?
        .message;
    assert!(message.contains("field is immutable"), "message: {message}");
    assert_eq!(jobs.get("once").await?.uid(), first.uid());

    once(ns, "busybox:1.37")
        .annotate("flotilla.io/recreate-on-immutable", "true")
        .apply(&fed.host)
        .await?;
    wait_object(T, &jobs, "once", |j| {
        ensure!(j.uid() != first.uid(), "same uid");
        let image = j
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first().and_then(|c| c.image.as_deref()));
        ensure!(image == Some("busybox:1.37"), "image {image:?}");
        Ok(())
    })
    .await?;
    fonce.wait_propagated().await?;
    Ok(())
}
