//! At join, a member that serves the About API but declares no id gets one: a
//! `cluster.clusterset.k8s.io` ClusterProperty whose value is the uid of its `kube-system`
//! namespace (stable for the cluster's life and unique, as KEP-2149 suggests). An id a
//! member already declares is never changed; a member without the About CRD is left alone.

use flotilla_api::about::{ABOUT_GROUP, CLUSTER_ID_PROPERTY, ClusterProperty, ClusterPropertySpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, ResourceExt, api::PostParams};
use tracing::{debug, info};

/// What [`ensure_cluster_id`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterId {
    /// The member does not serve `about.k8s.io/v1alpha1`.
    NotServed,
    /// The member already declares this id.
    Declared(String),
    /// Flotilla declared this id.
    Created(String),
}

/// Declares the member's id when it serves the About API and has none.
pub async fn ensure_cluster_id(member: &Client) -> Result<ClusterId, kube::Error> {
    let served = match member
        .list_api_group_resources(&format!("{ABOUT_GROUP}/v1alpha1"))
        .await
    {
        Ok(list) => list.resources.iter().any(|r| r.name == "clusterproperties"),
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => return Err(e),
    };
    if !served {
        debug!("the member does not serve the About API; no cluster id declared");
        return Ok(ClusterId::NotServed);
    }
    let properties: Api<ClusterProperty> = Api::all(member.clone());
    if let Some(existing) = properties.get_opt(CLUSTER_ID_PROPERTY).await? {
        return Ok(ClusterId::Declared(existing.spec.value));
    }
    let namespaces: Api<Namespace> = Api::all(member.clone());
    let uid = namespaces
        .get("kube-system")
        .await?
        .uid()
        .unwrap_or_default();
    let property = ClusterProperty::new(
        CLUSTER_ID_PROPERTY,
        ClusterPropertySpec { value: uid.clone() },
    );
    match properties.create(&PostParams::default(), &property).await {
        Ok(_) => {
            info!(id = %uid, "declared the member's cluster id ({CLUSTER_ID_PROPERTY})");
            Ok(ClusterId::Created(uid))
        }
        // Declared meanwhile by someone else: theirs stands.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = properties.get(CLUSTER_ID_PROPERTY).await?;
            Ok(ClusterId::Declared(existing.spec.value))
        }
        Err(e) => Err(e),
    }
}
