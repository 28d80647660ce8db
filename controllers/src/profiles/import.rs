//! Other cluster managers' ClusterProfiles as members: with the controller-manager's
//! `--access-providers FILE` (KEP-5339's consumer file, [`AccessProviders`]), each
//! ClusterProfile in the profiles namespace that is not Flotilla's and offers an access
//! provider configured in the file becomes a KubeFedCluster of the same name: the
//! provider's `cluster` gives `apiEndpoint`, `caBundle` and `proxyURL`, the configured exec
//! plugin gives `spec.exec`, the profile's labels are what placement selects on. From then
//! on the registry, placement and sync treat it as any push member, its credential coming
//! from the plugin (which must lie under `--exec-plugin-dir`, like every `spec.exec`).
//!
//! The KubeFedCluster carries [`IMPORTED_FROM`] and, when it lives in the profile's
//! namespace, the profile as its owner; it is deleted when the profile goes or no longer
//! offers a configured provider. A profile that cannot be imported gets a Warning Event
//! (`ClusterProfileNotImported`) saying why. A KubeFedCluster of that name that was not
//! imported is never touched. The plan is a pure function of the caches ([`plan`]); no
//! credential passes through here (the file and the profiles hold none).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use flotilla_api::{
    KubeFedCluster, KubeFedClusterSpec,
    core::{ExecEnvVar, ExecPlugin, TlsValidation},
    inventory::ClusterProfile,
};
use flotilla_multicluster::{
    gate::{Gate, store_ready},
    provider::profiles::{AccessProviders, choose},
    runner::{Action, PassRunner, Retry},
    tasks::AbortOnDrop,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    config::ExecConfig,
    runtime::events::{EventType, Recorder},
};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{info, instrument, warn};

use super::{Namespaces, plan::is_foreign};
use crate::watch::{WatchParams, notifying_store};

/// Annotation on an imported KubeFedCluster: the name of its ClusterProfile.
pub const IMPORTED_FROM: &str = "flotilla.io/imported-from-cluster-profile";
/// Field manager of imported KubeFedClusters.
pub const FIELD_MANAGER: &str = "flotilla-profile-import";
/// Reason of the Warning Event on a profile that cannot be imported.
pub const NOT_IMPORTED: &str = "ClusterProfileNotImported";
/// How often everything is compared again without a change.
const RECHECK: Duration = Duration::from_secs(300);
const REPORTING_CONTROLLER: &str = "flotilla-profile-import";

/// Whether `kfc` was imported from a ClusterProfile (and is this controller's).
pub fn is_imported(kfc: &KubeFedCluster) -> bool {
    kfc.annotations().contains_key(IMPORTED_FROM)
}

/// One write, or one refusal to report.
#[derive(Clone, Debug)]
pub enum Op {
    /// Create or update an imported KubeFedCluster.
    Apply(Box<KubeFedCluster>),
    /// Delete an imported KubeFedCluster whose profile left or is no longer usable.
    Delete {
        /// Its name.
        name: String,
        /// Its uid, so that one recreated meanwhile is kept.
        uid: Option<String>,
    },
    /// The profile cannot be imported: why.
    Refuse {
        /// The profile.
        profile: String,
        /// Why, for the Warning Event.
        why: String,
    },
}

/// The `spec.exec` of a consumer-side exec configuration.
pub fn exec_plugin(config: &ExecConfig) -> Result<ExecPlugin, String> {
    let command = config
        .command
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or("its exec configuration has no command")?;
    let env = config
        .env
        .iter()
        .flatten()
        .map(|e| match (e.get("name"), e.get("value")) {
            (Some(name), Some(value)) => Ok(ExecEnvVar {
                name: name.clone(),
                value: value.clone(),
            }),
            _ => Err("an env entry of its exec configuration lacks name or value".to_string()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ExecPlugin {
        api_version: config.api_version.clone(),
        command,
        args: config.args.clone().unwrap_or_default(),
        env,
    })
}

/// The KubeFedCluster a foreign profile gives in namespace `ns`, or why it gives none.
pub fn desired_cluster(
    profile: &ClusterProfile,
    access: &AccessProviders,
    ns: &str,
) -> Result<KubeFedCluster, String> {
    let (offered, config) = choose(profile, access)?;
    let name = profile.name_any();
    let cluster = &offered.cluster;
    if cluster.server.is_empty() {
        return Err(format!(
            "access provider {:?} names no server",
            offered.name
        ));
    }
    if cluster.tls_server_name.is_some() {
        return Err(format!(
            "access provider {:?} sets tls-server-name, which KubeFedClusters cannot express",
            offered.name
        ));
    }
    let exec = exec_plugin(&config.exec_config)
        .map_err(|e| format!("access provider {:?}: {e}", offered.name))?;
    let spec = KubeFedClusterSpec {
        api_endpoint: cluster.server.clone(),
        ca_bundle: cluster.certificate_authority_data.clone(),
        disabled_tls_validations: match cluster.insecure_skip_tls_verify {
            true => vec![TlsValidation::All],
            false => Vec::new(),
        },
        proxy_url: cluster.proxy_url.clone(),
        exec: Some(Box::new(exec)),
        ..KubeFedClusterSpec::default()
    };
    let mut kfc = KubeFedCluster::new(&name, spec);
    kfc.metadata.namespace = Some(ns.to_owned());
    kfc.metadata.labels = Some(profile.labels().clone());
    kfc.metadata.annotations = Some(BTreeMap::from([(IMPORTED_FROM.to_owned(), name)]));
    if profile.namespace().as_deref() == Some(ns) {
        kfc.metadata.owner_references = owner(profile).map(|o| vec![o]);
    }
    Ok(kfc)
}

fn owner(profile: &ClusterProfile) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: ClusterProfile::api_version(&()).into_owned(),
        kind: ClusterProfile::kind(&()).into_owned(),
        name: profile.name_any(),
        uid: profile.uid()?,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// Whether `current` is `desired` in everything this controller writes (others may add
/// labels, e.g. the About API's property labels).
fn up_to_date(desired: &KubeFedCluster, current: &KubeFedCluster) -> bool {
    let labels = desired
        .labels()
        .iter()
        .all(|(k, v)| current.labels().get(k) == Some(v));
    labels
        && desired.spec == current.spec
        && current.annotations().get(IMPORTED_FROM) == desired.annotations().get(IMPORTED_FROM)
        && desired.owner_references() == current.owner_references()
}

/// The writes that bring the KubeFedClusters in line with the profiles.
pub fn plan(
    profiles: &[&ClusterProfile],
    clusters: &[&KubeFedCluster],
    access: &AccessProviders,
    ns: &str,
) -> Vec<Op> {
    let by_name: BTreeMap<String, &KubeFedCluster> =
        clusters.iter().map(|k| (k.name_any(), *k)).collect();
    let mut ops = Vec::new();
    let mut wanted = BTreeSet::new();
    for profile in profiles.iter().filter(|p| is_foreign(p)) {
        let name = profile.name_any();
        // A profile that offers no access provider (yet: its cluster manager writes them
        // into the status after creating it) is no candidate: no cluster, no Event (an
        // imported cluster whose profile stopped offering any goes, as below).
        if !offers_access(profile) {
            continue;
        }
        let current = by_name.get(&name);
        if let Some(c) = current.filter(|c| !is_imported(c)) {
            let why = format!(
                "KubeFedCluster {ns}/{} already exists and was not imported from a profile",
                c.name_any()
            );
            ops.push(Op::Refuse { profile: name, why });
            continue;
        }
        match desired_cluster(profile, access, ns) {
            Ok(desired) => {
                wanted.insert(name);
                if !current.is_some_and(|c| up_to_date(&desired, c)) {
                    ops.push(Op::Apply(Box::new(desired)));
                }
            }
            Err(why) => ops.push(Op::Refuse { profile: name, why }),
        }
    }
    for kfc in clusters.iter().filter(|k| is_imported(k)) {
        if !wanted.contains(&kfc.name_any()) && kfc.meta().deletion_timestamp.is_none() {
            ops.push(Op::Delete {
                name: kfc.name_any(),
                uid: kfc.uid(),
            });
        }
    }
    ops
}

/// Whether a profile's status offers any access (or credential) provider.
fn offers_access(profile: &ClusterProfile) -> bool {
    profile
        .status
        .as_ref()
        .is_some_and(|s| !s.access_providers.is_empty() || !s.credential_providers.is_empty())
}

/// Imports the foreign ClusterProfiles of `namespaces.profiles` as KubeFedClusters of
/// `namespaces.clusters`. Runs until aborted.
pub async fn run(host: Client, namespaces: Namespaces, access: AccessProviders) {
    let changed = Arc::new(Notify::new());
    let kfcs_api: Api<KubeFedCluster> = Api::namespaced(host.clone(), &namespaces.clusters);
    let profiles_api: Api<ClusterProfile> = Api::namespaced(host.clone(), &namespaces.profiles);
    let (kfcs, kfc_watch) = notifying_store(
        kfcs_api.clone(),
        WatchParams::host("kubefed cluster"),
        &changed,
    );
    let (profiles, profile_watch) =
        notifying_store(profiles_api, WatchParams::host("cluster profile"), &changed);
    let (gate, gate_task) = {
        let (kfcs, profiles) = (kfcs.clone(), profiles.clone());
        Gate::after(async move { store_ready(&kfcs).await && store_ready(&profiles).await })
    };
    let _abort = AbortOnDrop::from([kfc_watch, profile_watch, gate_task]);
    let recorder = crate::events::recorder(host, REPORTING_CONTROLLER);
    let names: Vec<&str> = access.providers.iter().map(|p| p.name.as_str()).collect();
    info!(providers = ?names, "importing other cluster managers' ClusterProfiles");
    let mut runner = PassRunner::new("cluster-profile-import", changed)
        .period(RECHECK)
        .retry(Retry::Fixed(Duration::from_secs(5)))
        .gate(gate);
    let mut reported = BTreeMap::<String, String>::new();
    while runner.next().await.is_some() {
        let (profiles, clusters) = (profiles.state(), kfcs.state());
        let profiles: Vec<&ClusterProfile> = profiles.iter().map(|p| &**p).collect();
        let clusters: Vec<&KubeFedCluster> = clusters.iter().map(|k| &**k).collect();
        let ops = plan(&profiles, &clusters, &access, &namespaces.clusters);
        let refused: BTreeSet<String> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Refuse { profile, .. } => Some(profile.clone()),
                _ => None,
            })
            .collect();
        reported.retain(|name, _| refused.contains(name));
        let mut failed = false;
        for op in ops {
            let target = Target {
                kfcs: &kfcs_api,
                recorder: &recorder,
                profiles: &profiles,
            };
            failed |= carry_out(target, op, &mut reported).await.is_err();
        }
        runner.finish(match failed {
            true => Action::backoff(),
            false => Action::AwaitChange,
        });
    }
}

/// What an [`Op`] is carried out on.
#[derive(Clone, Copy)]
struct Target<'a> {
    kfcs: &'a Api<KubeFedCluster>,
    recorder: &'a Recorder,
    profiles: &'a [&'a ClusterProfile],
}

#[instrument(skip_all)]
async fn carry_out(
    target: Target<'_>,
    op: Op,
    reported: &mut BTreeMap<String, String>,
) -> Result<(), ()> {
    match op {
        Op::Apply(kfc) => {
            let name = kfc.name_any();
            let mut body = json!({
                "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
                "metadata": {"name": name, "labels": kfc.labels(),
                             "annotations": kfc.annotations(),
                             "ownerReferences": kfc.owner_references()},
                "spec": kfc.spec,
            });
            // No Secret: the credential comes from the plugin (an empty name is refused).
            if let Some(spec) = body["spec"].as_object_mut() {
                spec.remove("secretRef");
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match target
                .kfcs
                .patch(&name, &params, &Patch::Apply(&body))
                .await
            {
                Ok(_) => info!(cluster = %name, "KubeFedCluster imported from its ClusterProfile"),
                Err(error) => {
                    warn!(cluster = %name, %error, "importing a ClusterProfile failed; retrying");
                    return Err(());
                }
            }
        }
        Op::Delete { name, uid } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match target.kfcs.delete(&name, &params).await {
                Ok(_) => {
                    info!(cluster = %name, "imported KubeFedCluster deleted: its ClusterProfile left or is no longer usable")
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(error) => {
                    warn!(cluster = %name, %error, "deleting an imported KubeFedCluster failed; retrying");
                    return Err(());
                }
            }
        }
        Op::Refuse { profile, why } => {
            if reported.get(&profile) == Some(&why) {
                return Ok(());
            }
            warn!(%profile, %why, "ClusterProfile not imported");
            let Some(p) = target.profiles.iter().find(|p| p.name_any() == profile) else {
                return Ok(());
            };
            let note = format!("not a member of this federation: {why}");
            crate::events::publish(
                target.recorder,
                &p.object_ref(&()),
                EventType::Warning,
                NOT_IMPORTED,
                "ImportClusterProfile",
                note,
            )
            .await;
            reported.insert(profile, why);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::inventory::{
        AccessCluster, AccessProvider, ClusterManager, ClusterProfileSpec, ClusterProfileStatus,
    };

    const NS: &str = "kube-federation-system";

    fn profile(name: &str, manager: &str, provider: &str) -> ClusterProfile {
        let mut p = ClusterProfile::new(
            name,
            ClusterProfileSpec {
                display_name: None,
                cluster_manager: ClusterManager {
                    name: manager.into(),
                },
            },
        );
        p.metadata.namespace = Some(NS.into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.labels = Some(BTreeMap::from([("region".into(), "eu".into())]));
        p.status = Some(ClusterProfileStatus {
            access_providers: vec![AccessProvider {
                name: provider.into(),
                cluster: AccessCluster {
                    server: format!("https://{name}:6443"),
                    certificate_authority_data: Some("Q0E=".into()),
                    ..AccessCluster::default()
                },
            }],
            ..ClusterProfileStatus::default()
        });
        p
    }

    fn access() -> AccessProviders {
        let file = r#"{"providers": [{"name": "vault", "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/plugins/creds",
            "args": ["--cluster"], "env": [{"name": "MODE", "value": "read"}]}}]}"#;
        AccessProviders::parse(file).unwrap_or_default()
    }

    #[test]
    fn a_foreign_profile_with_a_configured_provider_becomes_an_exec_kubefedcluster() {
        let p = profile("edge1", "fleet", "vault");
        let ops = plan(&[&p], &[], &access(), NS);
        let [Op::Apply(kfc)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert_eq!(kfc.spec.api_endpoint, "https://edge1:6443");
        assert_eq!(kfc.spec.ca_bundle.as_deref(), Some("Q0E="));
        let exec = kfc
            .spec
            .exec
            .as_ref()
            .map(|e| (e.command.as_str(), e.args.len(), e.env.len()));
        assert_eq!(exec, Some(("/plugins/creds", 1, 1)));
        assert_eq!(kfc.labels().get("region").map(String::as_str), Some("eu"));
        assert_eq!(
            kfc.annotations().get(IMPORTED_FROM).map(String::as_str),
            Some("edge1")
        );
        assert_eq!(kfc.owner_references()[0].uid, "uid-edge1");
        // Applied, it plans nothing more.
        let again = plan(&[&p], &[kfc], &access(), NS);
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn flotillas_own_profiles_and_unconfigured_providers_are_not_imported() {
        let own = profile("member1", "flotilla", "vault");
        let other = profile("edge2", "fleet", "cloud-iam");
        let ops = plan(&[&own, &other], &[], &access(), NS);
        let [Op::Refuse { profile, why }] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert_eq!(profile, "edge2");
        assert!(why.contains("cloud-iam") && why.contains("vault"), "{why}");
    }

    #[test]
    fn a_profile_offering_no_access_provider_yet_is_passed_over_without_a_refusal() {
        let mut bare = profile("edge3", "fleet", "vault");
        if let Some(status) = bare.status.as_mut() {
            status.access_providers.clear();
            status.credential_providers.clear();
        }
        assert!(plan(&[&bare], &[], &access(), NS).is_empty());
    }

    #[test]
    fn an_imported_cluster_goes_with_its_profile_and_a_joined_one_is_left_alone() {
        let p = profile("edge1", "fleet", "vault");
        let Ok(imported) = desired_cluster(&p, &access(), NS) else {
            panic!("not imported")
        };
        let ops = plan(&[], &[&imported], &access(), NS);
        assert!(
            matches!(ops.as_slice(), [Op::Delete { name, .. }] if name == "edge1"),
            "{ops:?}"
        );
        let joined = KubeFedCluster::new("edge1", KubeFedClusterSpec::default());
        let ops = plan(&[&p], &[&joined], &access(), NS);
        assert!(
            matches!(ops.as_slice(), [Op::Refuse { why, .. }] if why.contains("not imported")),
            "{ops:?}"
        );
    }
}
