//! What the ClusterProfile of a KubeFedCluster should be, and which writes bring the cached
//! profiles there — pure functions of the objects, no I/O. The profile is a function of its
//! KubeFedCluster alone (times come from the KubeFedCluster, never from the clock), so a
//! second look at an unchanged cluster plans nothing.

use std::collections::BTreeMap;

use flotilla_api::{
    KubeFedCluster,
    core::{TlsValidation, condition as kfc_condition},
    inventory::{
        ACCESS_PROVIDER_NAME, AccessCluster, AccessProvider, CLUSTER_MANAGER_LABEL,
        CLUSTER_MANAGER_NAME, ClusterManager, ClusterProfile, ClusterProfileSpec,
        ClusterProfileStatus, ClusterVersion, ProfileCondition, Property, condition,
    },
};
use flotilla_core::capacity_profile::{is_resource_property, resource_properties};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

/// `ControlPlaneHealthy=Unknown`: the registry has not probed the cluster yet.
pub const REASON_NOT_PROBED: &str = "HealthNotProbed";
/// `ControlPlaneHealthy`: the registry's Ready condition carried no reason of its own.
pub const REASON_READY: &str = "ClusterReady";
/// `ControlPlaneHealthy=False`: the registry's Ready condition carried no reason of its own.
pub const REASON_NOT_READY: &str = "ClusterNotReady";
/// `Joined=True`: the cluster has a KubeFedCluster.
pub const REASON_JOINED: &str = "KubeFedClusterRegistered";

/// Which parts of a profile a write brings up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Its labels, owner and spec (one apply).
    pub spec: bool,
    /// Its status (one apply of the status subresource).
    pub status: bool,
}

impl Parts {
    /// Both: a profile to create, or one whose spec and status both changed.
    pub const ALL: Parts = Parts {
        spec: true,
        status: true,
    };
}

/// One write to the host.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Create or update the profile: the parts that differ (metadata and spec, then status).
    Apply(Box<ClusterProfile>, Parts),
    /// Delete the profile of a cluster that left, if it still has this uid.
    Delete {
        /// Name of the profile.
        name: String,
        /// Its uid, so that a profile recreated meanwhile is kept.
        uid: Option<String>,
    },
}

impl Op {
    /// The `op` label of the write metric.
    pub fn as_str(&self) -> &'static str {
        match self {
            Op::Apply(..) => "apply",
            Op::Delete { .. } => "delete",
        }
    }
}

/// What a profile is made of besides its KubeFedCluster.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The namespace the profiles live in.
    pub namespace: &'a str,
    /// The About API properties of the members whose ClusterProperties are known (watched
    /// and listed); a member missing here keeps the properties its profile has.
    pub properties: &'a BTreeMap<String, Vec<Property>>,
}

/// The ClusterProfile of `kfc` in `inputs.namespace`, or `None` while the KubeFedCluster is
/// being deleted (its profile goes with it). `current` is the profile as it stands.
pub fn desired_profile(
    kfc: &KubeFedCluster,
    inputs: Inputs<'_>,
    current: Option<&ClusterProfile>,
) -> Option<ClusterProfile> {
    if kfc.meta().deletion_timestamp.is_some() {
        return None;
    }
    let name = kfc.name_any();
    let mut profile = ClusterProfile::new(
        &name,
        ClusterProfileSpec {
            display_name: Some(name.clone()),
            cluster_manager: ClusterManager {
                name: CLUSTER_MANAGER_NAME.into(),
            },
        },
    );
    profile.metadata.namespace = Some(inputs.namespace.to_string());
    profile.metadata.labels = Some(labels(kfc));
    // An owner must be in the dependent's namespace: profiles kept elsewhere are deleted by
    // the controller alone.
    if kfc.namespace().as_deref() == Some(inputs.namespace) {
        profile.metadata.owner_references = owner(kfc).map(|o| vec![o]);
    }
    let mut status = status(kfc);
    let published: &[Property] = current
        .and_then(|p| p.status.as_ref())
        .map(|s| s.properties.as_slice())
        .unwrap_or_default();
    let mut properties: Vec<Property> = match inputs.properties.get(&name) {
        Some(known) => known.clone(),
        None => published.to_vec(),
    };
    // The member's resource summary, coarse (capacity_profile's rule), after its own.
    properties.retain(|p| !is_resource_property(&p.name));
    let summary = kfc.status.as_ref().and_then(|s| s.resources.as_deref());
    properties.extend(resource_properties(summary, published));
    status.properties = properties;
    profile.status = Some(status);
    Some(profile)
}

/// The KubeFedCluster's labels (what placement selects on) and the cluster-manager label.
fn labels(kfc: &KubeFedCluster) -> BTreeMap<String, String> {
    let mut labels = kfc.labels().clone();
    labels.insert(CLUSTER_MANAGER_LABEL.into(), CLUSTER_MANAGER_NAME.into());
    labels
}

/// The KubeFedCluster as the profile's controller, so that the garbage collector removes
/// the profile even when the cluster leaves while no control plane runs.
fn owner(kfc: &KubeFedCluster) -> Option<OwnerReference> {
    let uid = kfc.uid()?;
    Some(OwnerReference {
        api_version: KubeFedCluster::api_version(&()).into_owned(),
        kind: KubeFedCluster::kind(&()).into_owned(),
        name: kfc.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// RFC 3339 creation time of the KubeFedCluster, as the API server writes it.
fn created(kfc: &KubeFedCluster) -> String {
    kfc.meta()
        .creation_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn status(kfc: &KubeFedCluster) -> ClusterProfileStatus {
    let joined_at = created(kfc);
    let version = kfc
        .status
        .as_ref()
        .and_then(|s| s.kubernetes_version.clone())
        .map(|v| ClusterVersion {
            kubernetes: Some(v),
        });
    ClusterProfileStatus {
        conditions: vec![
            health_condition(kfc, &joined_at),
            ProfileCondition {
                type_: condition::JOINED.into(),
                status: "True".into(),
                observed_generation: None,
                last_transition_time: joined_at,
                reason: REASON_JOINED.into(),
                message: format!("registered as KubeFedCluster {}", kfc.name_any()),
            },
        ],
        version,
        properties: Vec::new(),
        credential_providers: Vec::new(),
        access_providers: vec![access_provider(kfc)],
    }
}

/// `ControlPlaneHealthy` from the registry's Ready condition.
pub fn health_condition(kfc: &KubeFedCluster, joined_at: &str) -> ProfileCondition {
    let ready = kfc
        .status
        .as_ref()
        .and_then(|s| s.condition(kfc_condition::READY));
    let Some(ready) = ready else {
        return ProfileCondition {
            type_: condition::CONTROL_PLANE_HEALTHY.into(),
            status: "Unknown".into(),
            observed_generation: None,
            last_transition_time: joined_at.into(),
            reason: REASON_NOT_PROBED.into(),
            message: "the cluster's health has not been checked yet".into(),
        };
    };
    let status = match ready.status.as_str() {
        "True" | "False" => ready.status.clone(),
        _ => "Unknown".to_string(),
    };
    let fallback = if status == "True" {
        REASON_READY
    } else {
        REASON_NOT_READY
    };
    ProfileCondition {
        type_: condition::CONTROL_PLANE_HEALTHY.into(),
        status,
        observed_generation: None,
        last_transition_time: ready
            .last_transition_time
            .clone()
            .unwrap_or_else(|| joined_at.into()),
        reason: ready
            .reason
            .clone()
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| fallback.into()),
        message: ready.message.clone().unwrap_or_default(),
    }
}

/// Where the API server is and how to verify it — never how to authenticate: the
/// KubeFedCluster's token Secret stays the control plane's own.
fn access_provider(kfc: &KubeFedCluster) -> AccessProvider {
    let spec = &kfc.spec;
    AccessProvider {
        name: ACCESS_PROVIDER_NAME.into(),
        cluster: AccessCluster {
            server: spec.api_endpoint.clone(),
            tls_server_name: None,
            insecure_skip_tls_verify: spec.disabled_tls_validations.contains(&TlsValidation::All),
            certificate_authority_data: spec.ca_bundle.clone().filter(|c| !c.is_empty()),
            proxy_url: spec.proxy_url.clone().filter(|p| !p.is_empty()),
            disable_compression: false,
        },
    }
}

/// Whether a profile found under a cluster's name belongs to another cluster manager: it is
/// left alone (and the cluster gets no Flotilla profile) rather than taken over.
pub fn is_foreign(existing: &ClusterProfile) -> bool {
    existing.spec.cluster_manager.name != CLUSTER_MANAGER_NAME
}

/// The parts of `current` that are not `desired` in what Flotilla writes: its labels (other
/// labels may be added by others), owner and spec, and its status. `applied`: what this
/// process last wrote, so a label the KubeFedCluster lost is also removed.
pub fn stale_parts(
    desired: &ClusterProfile,
    current: Option<&ClusterProfile>,
    applied: Option<&ClusterProfile>,
) -> Parts {
    let Some(current) = current else {
        return Parts::ALL;
    };
    let labels_match = desired
        .labels()
        .iter()
        .all(|(k, v)| current.labels().get(k) == Some(v));
    let owner_matches = desired
        .owner_references()
        .iter()
        .all(|o| current.owner_references().contains(o));
    let as_applied = applied.is_none_or(|a| {
        a.labels() == desired.labels()
            && a.owner_references() == desired.owner_references()
            && a.spec == desired.spec
    });
    Parts {
        spec: !(labels_match && owner_matches && desired.spec == current.spec && as_applied),
        status: desired.status != current.status,
    }
}

/// The writes that make `profiles` (Flotilla's, label-selected) match `clusters`.
/// `applied` holds what was last written per profile, so a label the KubeFedCluster lost is
/// also removed from its profile.
pub fn plan<'a>(
    clusters: impl IntoIterator<Item = &'a KubeFedCluster>,
    profiles: &[&ClusterProfile],
    applied: &BTreeMap<String, ClusterProfile>,
    inputs: Inputs<'_>,
) -> Vec<Op> {
    let current: BTreeMap<String, &ClusterProfile> =
        profiles.iter().map(|p| (p.name_any(), *p)).collect();
    let mut wanted = BTreeMap::new();
    let mut ops = Vec::new();
    for kfc in clusters {
        let existing = current.get(&kfc.name_any()).copied();
        let Some(desired) = desired_profile(kfc, inputs, existing) else {
            continue;
        };
        let name = desired.name_any();
        let parts = stale_parts(&desired, current.get(&name).copied(), applied.get(&name));
        if parts.spec || parts.status {
            ops.push(Op::Apply(Box::new(desired.clone()), parts));
        }
        wanted.insert(name, ());
    }
    for (name, profile) in current {
        if !wanted.contains_key(&name) {
            ops.push(Op::Delete {
                name,
                uid: profile.uid(),
            });
        }
    }
    ops
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
