//! The soak's invariants besides the federated ConfigMaps' (`fault_harness::violations`)
//! and Multi-Cluster Services' ([`super::mcs`]): progressive rollouts and their revisions,
//! ServiceAccountImports and their kubeconfig Secrets, and the pull member's Works and
//! AppliedWorks. Each returns readable lines, empty when converged.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{
    DEFAULT_NAMESPACE, FederatedStatus, KubeFedCluster, MANAGED_LABEL, ServiceAccountImport,
    mcs_report::MCS_WORK_LABEL,
    multicluster::SECRET_LABEL,
    rollout::REVISION_ANNOTATION,
    work::{
        APPLIED, AppliedWork, WORK_SOURCE_NAME, WORK_SOURCE_NAMESPACE, WORK_TYPE_LABEL, Work,
        cluster_namespace, type_label,
    },
};
use k8s_openapi::api::{
    apps::v1::{ControllerRevision, Deployment},
    core::v1::{ConfigMap, Node, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::setup::{NS, PULL};
use super::workload::fd_api;
use crate::fault_harness::fcm_api;

/// Label of a rollout's ControllerRevisions naming the federated object.
const REVISION_NAME_LABEL: &str = "flotilla.io/federated-name";

/// Every FederatedDeployment (all rolled out progressively): propagated and `Rollout=True`
/// (`Complete`) for its generation; its target revision recorded as a ControllerRevision
/// owned by it; every member Deployment at the template's image, annotated with that
/// revision. No managed Deployment without its federated object, no revision without its
/// owner.
pub async fn rollouts(host: &Client, members: &[(String, Client)]) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut expected: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut uids = BTreeSet::new();
    for obj in fd_api(host).list(&ListParams::default()).await? {
        let name = obj.name_any();
        if obj.metadata.deletion_timestamp.is_some() {
            found.push(format!("{name}: deletion not complete"));
            continue;
        }
        uids.insert(obj.uid().unwrap_or_default());
        let status = FederatedStatus::from_dynamic(&obj);
        let generation = obj.metadata.generation.unwrap_or(0);
        let complete = status
            .rollout_condition()
            .is_some_and(|c| c.status == "True" && c.reason == "Complete");
        let propagated = status.propagation().is_some_and(|c| c.status == "True");
        if status.observed_generation != generation || !complete || !propagated {
            found.push(format!(
                "{name}: generation {generation}, observed {}, rollout {:?}, propagation {:?}; {}",
                status.observed_generation,
                status.rollout_condition().map(|c| (&c.status, &c.reason)),
                status.propagation().map(|c| (&c.status, &c.reason)),
                rollout_detail(host, &status, &name, members).await,
            ));
        }
        let Some(target) = status.rollout.as_ref().map(|r| r.target_revision.clone()) else {
            found.push(format!("{name}: no status.rollout"));
            continue;
        };
        let revisions: Api<ControllerRevision> = Api::namespaced(host.clone(), NS);
        let revision = format!("federateddeployment-{name}-{target}");
        match revisions.get_opt(&revision).await? {
            None => found.push(format!("{name}: revision {revision} missing")),
            Some(r)
                if !r
                    .owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == obj.uid().as_ref()) =>
            {
                found.push(format!("{name}: revision {revision} not owned by it"));
            }
            Some(_) => {}
        }
        let image =
            obj.data["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        expected.insert(name, (image, target));
    }
    let revisions: Api<ControllerRevision> = Api::namespaced(host.clone(), NS);
    let labelled = ListParams::default().labels(REVISION_NAME_LABEL);
    for r in revisions.list(&labelled).await? {
        if !r.owner_references().iter().any(|o| uids.contains(&o.uid)) {
            found.push(format!("revision {}: its owner is gone", r.name_any()));
        }
    }
    found.extend(member_deployments(members, &expected).await?);
    Ok(found)
}

/// Where a rollout that is not complete stands, for a diagnosis: the `Rollout` condition's
/// message, each cluster's state in `status.rollout`, and each member Deployment's
/// generations and replica counts (what the health check reads).
async fn rollout_detail(
    host: &Client,
    status: &FederatedStatus,
    name: &str,
    members: &[(String, Client)],
) -> String {
    let message = status
        .rollout_condition()
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let states: Vec<String> = status
        .rollout
        .iter()
        .flat_map(|r| &r.clusters)
        .map(|c| format!("{} {} since {}", c.name, c.state.as_str(), c.since))
        .collect();
    let mut deployments = Vec::new();
    for (cluster, client) in members {
        let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let shown = match api.get_opt(name).await {
            Ok(Some(d)) => deployment_summary(&d),
            Ok(None) => "absent".to_owned(),
            Err(e) => format!("unreadable: {e}"),
        };
        deployments.push(format!("{cluster} {shown}"));
    }
    format!(
        "{message:?}; clusters [{}]; Deployments [{}]; {PULL} Work {}",
        states.join(", "),
        deployments.join(", "),
        pull_report(host, name).await
    )
}

/// What the pull member's agent last reported on the Work of Deployment `name` (the
/// rollout's health of that member is read from it): the hash of the manifest it applied
/// against the manifest's, the member object's generation and its status.
async fn pull_report(host: &Client, name: &str) -> String {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let list = match works.list(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) => return format!("unreadable: {e}"),
    };
    let deployments = type_label("deployments", "apps");
    let found = list
        .iter()
        .filter(|w| w.labels().get(WORK_TYPE_LABEL) == Some(&deployments))
        .find_map(|w| Some((w, manifest_of(w, name)?)));
    let Some((w, i)) = found else {
        return "absent".to_owned();
    };
    let manifest_hash = w
        .spec
        .workload
        .manifests
        .get(i)
        .and_then(|m| m.pointer("/metadata/annotations"))
        .and_then(|a| a.get(flotilla_core::member::HASH_ANNOTATION))
        .and_then(|h| h.as_str())
        .unwrap_or_default()
        .to_owned();
    let report = w.manifest_report(i);
    let feedback = report.and_then(|r| r.status_feedback.as_ref());
    let field = |f: &str| feedback.and_then(|s| s.get(f)).cloned();
    format!(
        "generation {:?} manifest hash {manifest_hash} reported hash {:?} member generation {:?} observed {:?} replicas {:?} updated {:?} available {:?}",
        w.metadata.generation,
        report.and_then(|r| r.hash.clone()),
        report.and_then(|r| r.generation),
        field("observedGeneration"),
        field("replicas"),
        field("updatedReplicas"),
        field("availableReplicas"),
    )
}

/// The ordinal of the manifest rendering federated object `name` in Work `w` (a bundle's
/// manifest config, or a one-object Work's source annotation).
fn manifest_of(w: &Work, name: &str) -> Option<usize> {
    if !w.is_bundle() {
        let source = w.annotations().get(WORK_SOURCE_NAME).map(String::as_str);
        return (source == Some(name)).then_some(0);
    }
    (0..w.spec.workload.manifests.len())
        .find(|i| w.manifest_config(*i).is_some_and(|c| c.source_name == name))
}

/// The federated objects Work `w` renders: (its namespace, its name, the manifest ordinal).
fn sources(w: &Work) -> Vec<(Option<String>, String, usize)> {
    if !w.is_bundle() {
        let ns = w.annotations().get(WORK_SOURCE_NAMESPACE).cloned();
        let name = w.annotations().get(WORK_SOURCE_NAME).cloned();
        return vec![(ns, name.unwrap_or_default(), 0)];
    }
    (0..w.spec.workload.manifests.len())
        .map(|i| match w.manifest_config(i) {
            Some(c) => (c.source_namespace.clone(), c.source_name.clone(), i),
            None => (None, String::new(), i),
        })
        .collect()
}

/// A member Deployment's image, generations and replica counts in one line.
fn deployment_summary(d: &Deployment) -> String {
    let s = d.status.clone().unwrap_or_default();
    format!(
        "{} generation {:?} observed {:?} replicas {:?} updated {:?} ready {:?} available {:?}",
        flotilla_tests::member::first_image(d).unwrap_or_default(),
        d.metadata.generation,
        s.observed_generation,
        s.replicas,
        s.updated_replicas,
        s.ready_replicas,
        s.available_replicas,
    )
}

/// Every member's nodes `Ready` (the simulated kubelet's): a node that is not has its pods
/// unscheduled or evicted, and any rollout there waits for its deadline.
pub async fn nodes(members: &[(String, Client)]) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for (cluster, client) in members {
        for node in Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?
        {
            let ready = node
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .find(|c| c.type_ == "Ready");
            if ready.is_none_or(|c| c.status != "True") {
                let state = ready.map(|c| (&c.status, &c.reason));
                found.push(format!("{cluster}/{}: Ready {state:?}", node.name_any()));
            }
        }
    }
    Ok(found)
}

/// Each member's managed Deployments: exactly those `expected` (name → image, revision),
/// each at its image and annotated with its revision.
async fn member_deployments(
    members: &[(String, Client)],
    expected: &BTreeMap<String, (String, String)>,
) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let managed = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    for (cluster, client) in members {
        let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let actual: BTreeMap<String, Deployment> = api
            .list(&managed)
            .await?
            .into_iter()
            .map(|d| (d.name_any(), d))
            .collect();
        for (name, (image, target)) in expected {
            let Some(d) = actual.get(name) else {
                found.push(format!("{cluster}/{name}: Deployment missing"));
                continue;
            };
            let got_image = flotilla_tests::member::first_image(d).unwrap_or_default();
            let got_revision = d.annotations().get(REVISION_ANNOTATION).cloned();
            if got_image != image || got_revision.as_ref() != Some(target) {
                found.push(format!(
                    "{cluster}/{name}: image {got_image} revision {got_revision:?}, want {image} {target}"
                ));
            }
        }
        for name in actual.keys().filter(|n| !expected.contains_key(*n)) {
            found.push(format!("{cluster}/{name}: stray Deployment"));
        }
    }
    Ok(found)
}

/// Every ServiceAccountImport: `Ready=True` (`TokenIssued`); the Secret its status names
/// exists, is owned by it and holds a kubeconfig for the member's registered endpoint
/// that lists ConfigMaps there as the remote ServiceAccount. No import Secret without its
/// import.
pub async fn imports(host: &Client) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let secrets: Api<Secret> = Api::namespaced(host.clone(), NS);
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let mut uids = BTreeSet::new();
    let imports: Api<ServiceAccountImport> = Api::namespaced(host.clone(), NS);
    for import in imports.list(&ListParams::default()).await? {
        let name = import.name_any();
        if import.metadata.deletion_timestamp.is_some() {
            found.push(format!("import {name}: deletion not complete"));
            continue;
        }
        let uid = import.uid().unwrap_or_default();
        uids.insert(uid.clone());
        let status = import.status.clone().unwrap_or_default();
        let ready = status.ready();
        if !ready.is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("TokenIssued"))
        {
            let reason = ready.map(|c| (&c.status, &c.reason));
            found.push(format!("import {name}: Ready {reason:?}"));
            continue;
        }
        let Some(secret_name) = status.secret_name.clone() else {
            found.push(format!("import {name}: no secretName"));
            continue;
        };
        let Some(secret) = secrets.get_opt(&secret_name).await? else {
            found.push(format!("import {name}: Secret {secret_name} missing"));
            continue;
        };
        if !secret.owner_references().iter().any(|o| o.uid == uid) {
            found.push(format!(
                "import {name}: Secret {secret_name} not owned by it"
            ));
        }
        let endpoint = clusters
            .get(&import.spec.cluster_name)
            .await?
            .spec
            .api_endpoint;
        if let Err(e) = kubeconfig_works(&secret, &endpoint).await {
            found.push(format!("import {name}: kubeconfig: {e:#}"));
        }
    }
    let labelled = ListParams::default().labels(SECRET_LABEL);
    for s in secrets.list(&labelled).await? {
        if !s.owner_references().iter().any(|o| uids.contains(&o.uid)) {
            found.push(format!("Secret {}: its import is gone", s.name_any()));
        }
    }
    Ok(found)
}

/// The Secret's kubeconfig points at `endpoint` and lists ConfigMaps in [`NS`] there.
/// Errors never carry the token (only the API server's status).
async fn kubeconfig_works(secret: &Secret, endpoint: &str) -> anyhow::Result<()> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .ok_or_else(|| anyhow::anyhow!("no config key"))?;
    let kubeconfig = Kubeconfig::from_yaml(std::str::from_utf8(&bytes.0)?)?;
    let server = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .unwrap_or_default();
    anyhow::ensure!(server == endpoint, "server {server}, registered {endpoint}");
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let remote = Client::try_from(config)?;
    Api::<ConfigMap>::namespaced(remote, NS)
        .list(&ListParams::default().limit(1))
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) => anyhow::anyhow!("{} {}", s.code, s.reason),
            _ => anyhow::anyhow!("request failed"),
        })?;
    Ok(())
}

/// The pull member's inventory: every federated object placed on it (ConfigMaps,
/// Deployments, the namespace) rendered by exactly one manifest of one Work (its bundle),
/// each manifest and Work `Applied=True` for the Work's generation; in the member exactly
/// one AppliedWork per Work, each applied object live with the recorded UID.
pub async fn works(host: &Client, pull: &Client) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut want: BTreeSet<(String, String)> = BTreeSet::new();
    want.insert((type_label("namespaces", ""), NS.to_owned()));
    for obj in fcm_api(host, NS).list(&ListParams::default()).await? {
        let placed = obj.data["spec"]["placement"]["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == PULL);
        if placed && obj.metadata.deletion_timestamp.is_none() {
            want.insert((type_label("configmaps", ""), obj.name_any()));
        }
    }
    for obj in fd_api(host).list(&ListParams::default()).await? {
        if obj.metadata.deletion_timestamp.is_none() {
            want.insert((type_label("deployments", "apps"), obj.name_any()));
        }
    }
    let ns = cluster_namespace(PULL);
    let mut names = BTreeSet::new();
    let mut have: BTreeMap<(String, String), usize> = BTreeMap::new();
    // The MCS controller's import Works are not the sync controller's: not counted here.
    let sync_works = ListParams::default().labels(&format!("!{MCS_WORK_LABEL}"));
    for w in Api::<Work>::namespaced(host.clone(), &ns)
        .list(&sync_works)
        .await?
    {
        let kind = w.labels().get(WORK_TYPE_LABEL).cloned().unwrap_or_default();
        let generation = w.metadata.generation;
        for (source_ns, source, i) in sources(&w) {
            let key = (kind.clone(), source);
            if source_ns.as_deref() != Some(NS) || !want.contains(&key) {
                found.push(format!(
                    "Work {} manifest {i}: stray ({key:?})",
                    w.name_any()
                ));
            }
            let applied = w.manifest_report(i).and_then(|m| {
                m.conditions
                    .iter()
                    .find(|c| c.type_ == APPLIED && c.observed_generation == generation)
            });
            if applied.is_none_or(|c| c.status != "True") {
                let reason = applied.map(|c| (&c.status, &c.reason));
                found.push(format!("Work {} {key:?}: Applied {reason:?}", w.name_any()));
            }
            *have.entry(key).or_default() += 1;
        }
        let applied = w.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == APPLIED && c.observed_generation == generation)
        });
        if applied.is_none_or(|c| c.status != "True") {
            let reason = applied.map(|c| (&c.status, &c.reason));
            found.push(format!("Work {}: Applied {reason:?}", w.name_any()));
        }
        names.insert(w.name_any());
    }
    for (key, n) in &have {
        if *n > 1 {
            found.push(format!("{key:?}: in {n} manifests"));
        }
    }
    let keys: BTreeSet<_> = have.keys().cloned().collect();
    for missing in want.difference(&keys) {
        found.push(format!("Work of {missing:?}: missing"));
    }
    found.extend(applied_works(pull, &ns, &names).await?);
    Ok(found)
}

async fn applied_works(
    pull: &Client,
    ns: &str,
    works: &BTreeSet<String>,
) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for aw in Api::<AppliedWork>::all(pull.clone())
        .list(&ListParams::default())
        .await?
    {
        let work = aw.spec.work_name.clone();
        if aw.spec.work_namespace != ns || !works.contains(&work) {
            found.push(format!("AppliedWork {}: its Work is gone", aw.name_any()));
            continue;
        }
        *seen.entry(work).or_default() += 1;
        for r in aw.status.iter().flat_map(|s| s.applied_resources.iter()) {
            let id = &r.identifier;
            let api_version = if id.group.is_empty() {
                id.version.clone()
            } else {
                format!("{}/{}", id.group, id.version)
            };
            let ar = ApiResource {
                group: id.group.clone(),
                version: id.version.clone(),
                api_version,
                kind: id.kind.clone(),
                plural: id.resource.clone(),
            };
            let api: Api<DynamicObject> = if id.namespace.is_empty() {
                Api::all_with(pull.clone(), &ar)
            } else {
                Api::namespaced_with(pull.clone(), &id.namespace, &ar)
            };
            let live = api.get_opt(&id.name).await?;
            if live.as_ref().and_then(|o| o.uid()).as_deref() != Some(r.uid.as_str()) {
                found.push(format!(
                    "AppliedWork {}: {}/{} not live with the recorded UID",
                    aw.name_any(),
                    id.resource,
                    id.name
                ));
            }
        }
    }
    for work in works {
        match seen.get(work) {
            Some(1) => {}
            n => found.push(format!("Work {work}: {n:?} AppliedWorks")),
        }
    }
    Ok(found)
}
