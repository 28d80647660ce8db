//! Turning what a user types (`deployments.apps`, `deploy`, `ConfigMap`, `fcm`,
//! `federatedconfigmaps`, `widgets.example.com`) into a type: through API discovery for a
//! target type, through the FederatedTypeConfigs for an enabled one.

use anyhow::Context as _;
use flotilla_api::{
    FederatedTypeConfig,
    core::{ApiResource, Scope},
    crdgen::default_target_types,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
use kube::{Api, Client, ResourceExt};

/// A type found through discovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// Group, preferred version, kind, plural and scope.
    pub api: ApiResource,
    /// Short names (`deploy`).
    pub short_names: Vec<String>,
}

/// Whether `input` (lowercase) names `resource`: its plural, singular, kind or a short name.
pub fn resource_matches(resource: &APIResource, input: &str) -> bool {
    if resource.name.contains('/') {
        return false; // a subresource
    }
    resource.name == input
        || resource.singular_name.to_lowercase() == input
        || resource.kind.to_lowercase() == input
        || resource
            .short_names
            .iter()
            .flatten()
            .any(|s| s.to_lowercase() == input)
}

fn discovered(list: &APIResourceList, resource: &APIResource) -> Discovered {
    let (group, version) = match list.group_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), list.group_version.clone()),
    };
    Discovered {
        api: ApiResource {
            group,
            version,
            kind: resource.kind.clone(),
            plural_name: resource.name.clone(),
            scope: if resource.namespaced {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
        },
        short_names: resource.short_names.clone().unwrap_or_default(),
    }
}

fn find_in(list: &APIResourceList, input: &str) -> Option<Discovered> {
    list.resources
        .iter()
        .find(|r| resource_matches(r, input))
        .map(|r| discovered(list, r))
}

/// Resolves a type name through the API server's discovery, like `kubectl get TYPE`:
/// `plural.group` (or `kind.group`) looks only in that group; a bare name looks in the core
/// group first, then in every group in the server's priority order.
pub async fn discover(client: &Client, input: &str) -> anyhow::Result<Discovered> {
    let input = input.trim().to_lowercase();
    let groups = client
        .list_api_groups()
        .await
        .context("listing the API groups (discovery)")?;
    let preferred = |name: &str| {
        groups.groups.iter().find(|g| g.name == name).map(|g| {
            g.preferred_version
                .as_ref()
                .map(|v| v.group_version.clone())
                .or_else(|| g.versions.first().map(|v| v.group_version.clone()))
                .unwrap_or_default()
        })
    };
    if let Some((name, group)) = input.split_once('.')
        && let Some(gv) = preferred(group)
    {
        let list = client
            .list_api_group_resources(&gv)
            .await
            .with_context(|| format!("discovering the resources of {gv}"))?;
        if let Some(found) = find_in(&list, name) {
            return Ok(found);
        }
    }
    let core = client
        .list_core_api_resources("v1")
        .await
        .context("discovering the core resources")?;
    if let Some(found) = find_in(&core, &input) {
        return Ok(found);
    }
    for group in &groups.groups {
        let Some(gv) = preferred(&group.name) else {
            continue;
        };
        // A group whose aggregated API server is down must not hide the others.
        let Ok(list) = client.list_api_group_resources(&gv).await else {
            continue;
        };
        if let Some(found) = find_in(&list, &input) {
            return Ok(found);
        }
    }
    anyhow::bail!("the server has no resource type {input:?}")
}

/// The names an enabled type answers to, lowercase: the FTC name, the target's plural,
/// kind and `plural.group`, the federated type's plural, kind and `plural.group`, and the
/// short names Flotilla gives the default types (`cm`, `fcm`).
pub fn ftc_names(ftc: &FederatedTypeConfig) -> Vec<String> {
    let spec = &ftc.spec;
    let mut names = vec![
        ftc.name_any(),
        spec.target_type.plural_name.clone(),
        spec.target_type.kind.clone(),
        spec.target_type.qualified_name(),
        spec.federated_type.plural_name.clone(),
        spec.federated_type.kind.clone(),
        spec.federated_type.qualified_name(),
    ];
    if let Some(alpha) = flotilla_api::alpha::alpha_twin(&spec.federated_type) {
        names.push(alpha.qualified_name());
    }
    if let Some(t) = default_target_types().into_iter().find(|t| {
        t.api.group == spec.target_type.group && t.api.plural_name == spec.target_type.plural_name
    }) {
        for s in t.short_names {
            names.push(format!("f{s}"));
            names.push(s);
        }
    }
    names.iter().map(|n| n.to_lowercase()).collect()
}

/// The federated APIs an enabled type may have objects in, each with the kind its objects
/// are shown as: the FTC's federated type, and for `types.kubefed.io/v1beta1` types
/// kubefed's alpha twin as `<Kind>.types.kubefed.k8s.io` (its CRD may not be installed: a
/// 404 from it means no objects).
pub fn served_apis(ftc: &FederatedTypeConfig) -> Vec<(ApiResource, String)> {
    let beta = ftc.spec.federated_type.clone();
    let mut apis = vec![(beta.clone(), beta.kind.clone())];
    if let Some(alpha) = flotilla_api::alpha::alpha_twin(&beta) {
        let shown = format!("{}.{}", alpha.kind, alpha.group);
        apis.push((alpha, shown));
    }
    apis
}

/// The host API of `fed`'s objects: in namespace `ns` when the type is namespaced.
pub fn federated_api(host: &Client, fed: &ApiResource, ns: &str) -> Api<kube::api::DynamicObject> {
    let ar = fed.to_kube();
    if fed.namespaced() {
        Api::namespaced_with(host.clone(), ns, &ar)
    } else {
        Api::all_with(host.clone(), &ar)
    }
}

/// The FTCs whose names include `input` (case-insensitive).
pub fn match_ftcs<'a>(
    ftcs: &'a [FederatedTypeConfig],
    input: &str,
) -> Vec<&'a FederatedTypeConfig> {
    let input = input.trim().to_lowercase();
    ftcs.iter()
        .filter(|f| ftc_names(f).contains(&input))
        .collect()
}

/// Every FederatedTypeConfig in the control-plane namespace.
pub async fn list_ftcs(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<Vec<FederatedTypeConfig>> {
    let api: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&Default::default())
        .await
        .with_context(|| format!("listing the FederatedTypeConfigs in {namespace}"))?
        .items)
}

/// Finds the enabled type `input` names (target or federated, any of its names or short
/// names). Falls back to discovery for names only the server knows (a CRD's short names).
pub async fn ftc_for(
    client: &Client,
    namespace: &str,
    input: &str,
) -> anyhow::Result<FederatedTypeConfig> {
    let ftcs = list_ftcs(client, namespace).await?;
    let matches = match_ftcs(&ftcs, input);
    match matches.as_slice() {
        [one] => return Ok((*one).clone()),
        [] => {}
        many => anyhow::bail!(
            "{input:?} is ambiguous: it names {}",
            many.iter()
                .map(|f| f.name_any())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    // A short name of a federated type (`fwidget`) or of a target type (`wd`).
    if let Ok(found) = discover(client, input).await {
        let hit = ftcs.iter().find(|f| {
            let s = &f.spec;
            (found.api.group == s.target_type.group
                && found.api.plural_name == s.target_type.plural_name)
                || (found.api.group == s.federated_type.group
                    && found.api.plural_name == s.federated_type.plural_name)
        });
        if let Some(ftc) = hit {
            return Ok(ftc.clone());
        }
        anyhow::bail!(
            "type {} is not enabled for federation (no FederatedTypeConfig in {namespace}); run `flotilla enable {}`",
            found.api.qualified_name(),
            found.api.qualified_name()
        );
    }
    anyhow::bail!(
        "no enabled type is called {input:?} (FederatedTypeConfigs in {namespace}: {})",
        ftcs.iter()
            .map(|f| f.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::crdgen::federated_type_config;

    fn default_ftcs() -> Vec<FederatedTypeConfig> {
        default_target_types()
            .iter()
            .map(|t| federated_type_config(t, "kube-federation-system"))
            .collect()
    }

    fn names(found: Vec<&FederatedTypeConfig>) -> Vec<String> {
        found.iter().map(|f| f.name_any()).collect()
    }

    #[test]
    fn every_spelling_of_configmaps_finds_the_configmaps_type() {
        let ftcs = default_ftcs();
        for input in [
            "configmaps",
            "ConfigMap",
            "cm",
            "federatedconfigmaps",
            "FederatedConfigMap",
            "fcm",
            "federatedconfigmaps.types.kubefed.io",
        ] {
            assert_eq!(
                names(match_ftcs(&ftcs, input)),
                vec!["configmaps"],
                "{input}"
            );
        }
    }

    #[test]
    fn group_qualified_names_find_their_type() {
        let ftcs = default_ftcs();
        assert_eq!(
            names(match_ftcs(&ftcs, "deployments.apps")),
            vec!["deployments.apps"]
        );
        assert_eq!(
            names(match_ftcs(&ftcs, "fdeploy")),
            vec!["deployments.apps"]
        );
        assert!(match_ftcs(&ftcs, "widgets").is_empty());
    }

    #[test]
    fn discovery_entries_match_by_plural_singular_kind_and_short_name() {
        let r = APIResource {
            name: "deployments".into(),
            singular_name: "deployment".into(),
            kind: "Deployment".into(),
            short_names: Some(vec!["deploy".into()]),
            namespaced: true,
            ..APIResource::default()
        };
        for input in ["deployments", "deployment", "deploy"] {
            assert!(resource_matches(&r, input), "{input}");
        }
        assert!(!resource_matches(&r, "deploys"));
        let sub = APIResource {
            name: "deployments/scale".into(),
            kind: "Scale".into(),
            ..APIResource::default()
        };
        assert!(!resource_matches(&sub, "scale"));
    }

    #[test]
    fn a_discovered_resource_takes_group_and_version_from_its_list() {
        let list = APIResourceList {
            group_version: "example.com/v1".into(),
            resources: vec![APIResource {
                name: "widgets".into(),
                singular_name: "widget".into(),
                kind: "Widget".into(),
                namespaced: true,
                ..APIResource::default()
            }],
        };
        let found = find_in(&list, "widget").expect("found");
        assert_eq!(found.api.group, "example.com");
        assert_eq!(found.api.version, "v1");
        assert_eq!(found.api.qualified_name(), "widgets.example.com");
        let core = APIResourceList {
            group_version: "v1".into(),
            resources: list.resources.clone(),
        };
        assert_eq!(find_in(&core, "widgets").expect("found").api.group, "");
    }
}
