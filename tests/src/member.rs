//! Reading objects in member clusters the way several tests do: ConfigMap data, a
//! Deployment's replicas and image, and checks on them for [`crate::wait::wait_object`].

use std::collections::BTreeMap;

use anyhow::ensure;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{Api, Client};

/// The ConfigMaps of namespace `ns` in a cluster.
pub fn config_maps(client: &Client, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), ns)
}

/// The Deployments of namespace `ns` in a cluster.
pub fn deployments(client: &Client, ns: &str) -> Api<Deployment> {
    Api::namespaced(client.clone(), ns)
}

/// The data of ConfigMap `ns/name`, or `None` when there is no such ConfigMap.
pub async fn config_map_data(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let cm = config_maps(client, ns).get_opt(name).await?;
    Ok(cm.map(|c| c.data.unwrap_or_default()))
}

/// The value of `key` in a ConfigMap's data.
pub fn data_value<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

/// A check that a ConfigMap's data has `key` set to `value`.
pub fn data_is(key: &str, value: &str) -> impl Fn(&ConfigMap) -> anyhow::Result<()> {
    let (key, value) = (key.to_owned(), value.to_owned());
    move |cm| {
        ensure!(
            data_value(cm, &key) == Some(value.as_str()),
            "data {:?}",
            cm.data
        );
        Ok(())
    }
}

/// The `spec.replicas` of a Deployment.
pub fn replicas(deployment: &Deployment) -> Option<i32> {
    deployment.spec.as_ref()?.replicas
}

/// The image of a Deployment's first container.
pub fn first_image(deployment: &Deployment) -> Option<&str> {
    let pod = deployment.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers.first()?.image.as_deref()
}
