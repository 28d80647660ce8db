//! Member work sharded over controller-manager replicas (`--shard-member-work`), on real
//! clusters: the leader's control plane keeps only the Pull members' RBAC, and three
//! replicas (in-process, as `flotilla controller-manager` starts them) split the four Push
//! members with the library's sharding coordinator. Each member is held — in a replica's
//! share and by its fence Lease — by exactly one replica, all along; a change of the
//! enabled types reaches every member's ClusterRole through its holder; one replica is
//! killed (nothing released), its members are handed over once its Leases expire, and the
//! next change reaches every member again: nothing missed.
//!
//! The hand-over time is printed (`--nocapture`), not asserted.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::ensure;
use flotilla_api::{DEFAULT_NAMESPACE, FederatedTypeConfig};
use flotilla_controllers::{
    manager::{ControlPlane, Options},
    metrics::Metrics,
    multicluster::ClusterSet,
    sharded::{GROUP, ShardedMemberWork},
};
use flotilla_multicluster::shard::{GROUP_LABEL, ROLE_LABEL, rendezvous};
use flotilla_tests::{federation::federation, init_tracing, wait_for};
use k8s_openapi::api::{coordination::v1::Lease, rbac::v1::ClusterRole};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(90);
const MEMBERS: usize = 4;
const REPLICAS: [&str; 3] = ["replica-x", "replica-y", "replica-z"];
/// Short Leases, so that the hand-over after a kill is quick (replica names and the
/// members' split by rendezvous hashing are fixed, so the split is the same every run).
const LEASE: Duration = Duration::from_secs(3);

/// Every replica's share, sampled all along: a member ever held by two replicas at once is
/// recorded.
#[derive(Default)]
struct Record {
    samples: usize,
    overlaps: Vec<(String, Vec<String>)>,
}

/// The shares of the live replicas (a killed replica's leaves with it).
type Shares = Arc<Mutex<BTreeMap<String, ClusterSet>>>;

/// Samples the live replicas' shares every 50 ms until aborted.
fn watch_shares(shares: Shares, record: Arc<Mutex<Record>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let live = shares.lock().unwrap_or_else(|e| e.into_inner()).clone();
            for (replica, share) in &live {
                for c in share.snapshot() {
                    holders.entry(c.name).or_default().push(replica.clone());
                }
            }
            {
                let mut r = record.lock().unwrap_or_else(|e| e.into_inner());
                r.samples += 1;
                r.overlaps
                    .extend(holders.into_iter().filter(|(_, h)| h.len() > 1));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// The holder of each member's fence Lease.
async fn fence_holders(host: &Client) -> anyhow::Result<BTreeMap<String, String>> {
    let leases: Api<Lease> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let selector = format!("{GROUP_LABEL}={GROUP},{ROLE_LABEL}=fence");
    let prefix = format!("{GROUP}-fence-");
    Ok(leases
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|l| {
            let cluster = l
                .metadata
                .name
                .as_deref()?
                .strip_prefix(&prefix)?
                .to_owned();
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((cluster, holder))
        })
        .collect())
}

/// Waits until every member is in exactly one of `replicas`' shares, that replica is the
/// member's rendezvous owner among them (the split has settled) and the member's fence
/// Lease names it; returns who holds what.
async fn wait_split(
    host: &Client,
    replicas: &BTreeMap<String, ShardedMemberWork>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let members: BTreeSet<String> = (1..=MEMBERS).map(|i| format!("member{i}")).collect();
    wait_for(T, "every member held by exactly one replica", || async {
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (replica, work) in replicas {
            for c in work.share().snapshot() {
                held.entry(c.name).or_default().push(replica.clone());
            }
        }
        let fences = fence_holders(host).await?;
        for member in &members {
            let holders = held.get(member).cloned().unwrap_or_default();
            ensure!(holders.len() == 1, "{member} held by {holders:?}");
            let owner = rendezvous::owner(member, replicas.keys().map(String::as_str));
            ensure!(
                owner == Some(holders[0].as_str()),
                "{member} held by {holders:?}, owner {owner:?}"
            );
            ensure!(
                fences.get(member) == Some(&holders[0]),
                "{member}'s fence: {:?}, share of {holders:?}",
                fences.get(member)
            );
        }
        Ok(fences)
    })
    .await
}

async fn set_secrets_propagation(host: &Client, mode: &str) -> anyhow::Result<()> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(
        "secrets",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"propagation": mode}})),
    )
    .await?;
    Ok(())
}

/// Waits until every member's ClusterRole grants Secrets exactly when `granted`.
async fn wait_roles(members: &[Client], granted: bool) -> anyhow::Result<()> {
    for (i, member) in members.iter().enumerate() {
        let role = format!("kubefed-controller-manager:member{}-host", i + 1);
        let roles: Api<ClusterRole> = Api::all(member.clone());
        wait_for(T, &format!("{role}: secrets granted {granted}"), || async {
            let rules = roles.get(&role).await?.rules.unwrap_or_default();
            // Listing is what a federated type gets (a workload's dependencies get Secrets
            // by name only).
            let has = rules.iter().any(|r| {
                r.resources.iter().flatten().any(|res| res == "secrets")
                    && r.verbs.iter().any(|v| v == "list")
            });
            ensure!(has == granted, "secrets granted: {has}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_split_the_member_work_and_a_killed_one_s_members_are_handed_over()
-> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation(MEMBERS).await?;
    // The leader as `--shard-member-work` runs it: member RBAC for Pull members only.
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let options = Options {
        shard_member_work: true,
        ..Options::new(DEFAULT_NAMESPACE)
    };
    let metrics = Arc::new(Metrics::new());
    fed.control_plane = Some(ControlPlane::start_with(
        fed.host.clone(),
        &options,
        metrics,
    ));
    let mut replicas: BTreeMap<String, ShardedMemberWork> = REPLICAS
        .iter()
        .map(|r| {
            let work = ShardedMemberWork::start(fed.host.clone(), DEFAULT_NAMESPACE, r, LEASE);
            (r.to_string(), work)
        })
        .collect();
    let shares: Shares = Arc::new(Mutex::new(
        replicas
            .iter()
            .map(|(r, w)| (r.clone(), w.share().clone()))
            .collect(),
    ));
    let record = Arc::new(Mutex::new(Record::default()));
    let sampler = watch_shares(shares.clone(), record.clone());

    let split = wait_split(&fed.host, &replicas).await?;
    println!("split: {split:?}");
    let holders: BTreeSet<&String> = split.values().collect();
    ensure!(
        holders.len() > 1,
        "one replica holds every member: {split:?}"
    );
    // A change of the enabled types reaches every member through its holder.
    set_secrets_propagation(&fed.host, "Disabled").await?;
    wait_roles(&fed.members, false).await?;

    // The replica holding most members dies: nothing released.
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for holder in split.values() {
        *per_replica.entry(holder).or_default() += 1;
    }
    let victim = per_replica
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(r, _)| r.to_string())
        .unwrap_or_default();
    let killed = replicas.remove(&victim).expect("a replica holds members");
    shares
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&victim);
    killed.abort();
    let killed_at = Instant::now();
    let after = wait_split(&fed.host, &replicas).await?;
    println!(
        "killed {victim} (held {} members): handed over in {:.1} s: {after:?}",
        per_replica
            .get(victim.as_str())
            .copied()
            .unwrap_or_default(),
        killed_at.elapsed().as_secs_f64()
    );
    ensure!(
        after.values().all(|h| *h != victim),
        "a fence still names the killed replica: {after:?}"
    );
    // The next change reaches every member, the handed-over ones included.
    set_secrets_propagation(&fed.host, "Enabled").await?;
    wait_roles(&fed.members, true).await?;

    sampler.abort();
    let (samples, overlaps) = {
        let r = record.lock().unwrap_or_else(|e| e.into_inner());
        (r.samples, r.overlaps.clone())
    };
    println!("{samples} samples of the shares");
    ensure!(samples > 0, "the shares were never sampled");
    ensure!(
        overlaps.is_empty(),
        "members held by two replicas at once: {overlaps:?}"
    );
    for (_, work) in replicas {
        work.stop().await;
    }
    Ok(())
}
