//! The opt-in APIs of `flotilla enable`: `--kubefed-alpha` (kubefed's alpha
//! `types.kubefed.k8s.io/v1alpha1` CRD of one type, or without a type of every type enabled
//! in `types.kubefed.io/v1beta1`) and `--admiralty-imports` (Admiralty's ServiceAccountImport
//! CRD). `config/` leaves both out because their plurals are v1beta1's and Flotilla's own
//! too: with both CRDs of a pair installed, `kubectl get PLURAL` reads one group only. This
//! module decides which CRDs to apply and what to tell the user; `enable` applies them.

use anyhow::Context as _;
use flotilla_api::{
    FederatedTypeConfig, TYPES_GROUP, V1BETA1,
    alpha::{alpha_twin, as_alpha_crd},
    crdgen::{OptionalApi, TargetType},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::enable::{FederatedApi, enable_objects, target_schema};
use super::resolve;

/// An opt-in CRD to apply, and the API it belongs to.
#[derive(Debug, Clone)]
pub struct OptionalCrd {
    /// The API.
    pub api: OptionalApi,
    /// Its CRD.
    pub crd: CustomResourceDefinition,
}

/// The API, as said after "applied".
pub const fn label(api: OptionalApi) -> &'static str {
    match api {
        OptionalApi::KubefedAlpha => "kubefed's alpha API",
        OptionalApi::Admiralty => "Admiralty's API",
    }
}

/// What a user must know once `api` is served: which names now mean two resources, and how
/// to address each.
pub const fn note(api: OptionalApi) -> &'static str {
    match api {
        OptionalApi::KubefedAlpha => {
            "note: a type's plural now names two APIs (kubectl reads one of them); address v1beta1 \
             as PLURAL.types.kubefed.io or by its short name (fcm, fdeploy, ...), the alpha API as \
             PLURAL.types.kubefed.k8s.io (docs/api.md)"
        }
        OptionalApi::Admiralty => {
            "note: serviceaccountimports now names two APIs (kubectl reads one of them); address \
             Flotilla's as serviceaccountimports.multicluster.flotilla.io or saimport, Admiralty's \
             as serviceaccountimports.multicluster.admiralty.io or sai (docs/api.md)"
        }
    }
}

/// The alpha CRD of an enabled type: the Federated CRD `flotilla enable` builds for its
/// target (with the target CRD's `template_schema`, if any) in `types.kubefed.k8s.io`;
/// `None` for a type federated in another group, which has no alpha twin.
pub fn alpha_crd_for(
    ftc: &FederatedTypeConfig,
    template_schema: Option<Value>,
) -> Option<CustomResourceDefinition> {
    let twin = alpha_twin(&ftc.spec.federated_type)?;
    let target = TargetType {
        api: ftc.spec.target_type.clone(),
        short_names: Vec::new(),
    };
    let namespace = ftc.namespace().unwrap_or_default();
    let (beta, _) = enable_objects(
        &target,
        template_schema,
        &namespace,
        &FederatedApi::default(),
    );
    // The controller looks for the twin of the FTC's own federated type; a hand-written FTC
    // whose plural differs from the generated one has no CRD it would find.
    as_alpha_crd(&beta).filter(|alpha| alpha.name_any() == twin.qualified_name())
}

/// kubefed's alpha CRD of every type enabled in `types.kubefed.io/v1beta1` in the host's
/// control-plane namespace `kubefed_ns`.
pub async fn alpha_crds_of_enabled_types(
    host: &Client,
    kubefed_ns: &str,
) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut crds = Vec::new();
    for ftc in resolve::list_ftcs(host, kubefed_ns).await? {
        if alpha_twin(&ftc.spec.federated_type).is_none() {
            continue;
        }
        let schema = target_schema(host, &ftc.spec.target_type)
            .await
            .with_context(|| format!("FederatedTypeConfig {}", ftc.name_any()))?;
        let crd = alpha_crd_for(&ftc, schema).with_context(|| {
            format!(
                "FederatedTypeConfig {}: its federated type {} is not named as `flotilla enable` names it, so no alpha CRD would be found for it",
                ftc.name_any(),
                ftc.spec.federated_type.qualified_name()
            )
        })?;
        crds.push(crd);
    }
    anyhow::ensure!(
        !crds.is_empty(),
        "no FederatedTypeConfig in {kubefed_ns} federates a type in {TYPES_GROUP}/{V1BETA1}: enable types first (`kubectl apply -f config/default-types/` or `flotilla enable TYPE`)"
    );
    Ok(crds)
}

/// The opt-in CRDs `enable` applies: with `kubefed_alpha`, the alpha twin of `typed` (the
/// Federated CRD of the type named on the command line) or, without a type, of every
/// enabled type; with `admiralty`, Admiralty's ServiceAccountImport CRD.
pub async fn wanted(
    host: &Client,
    kubefed_ns: &str,
    kubefed_alpha: bool,
    admiralty: bool,
    typed: Option<&CustomResourceDefinition>,
) -> anyhow::Result<Vec<OptionalCrd>> {
    let mut out = Vec::new();
    let api = OptionalApi::KubefedAlpha;
    match (kubefed_alpha, typed) {
        (false, _) => {}
        (true, Some(crd)) => {
            let alpha = as_alpha_crd(crd).with_context(|| {
                format!(
                    "--kubefed-alpha serves kubefed's alpha twin of a {TYPES_GROUP}/{V1BETA1} type; {} is not one",
                    crd.name_any()
                )
            })?;
            out.push(OptionalCrd { api, crd: alpha });
        }
        (true, None) => out.extend(
            alpha_crds_of_enabled_types(host, kubefed_ns)
                .await?
                .into_iter()
                .map(|crd| OptionalCrd { api, crd }),
        ),
    }
    if admiralty {
        let api = OptionalApi::Admiralty;
        out.extend(api.crds().into_iter().map(|crd| OptionalCrd { api, crd }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::crdgen::{default_target_types, federated_type_config};

    #[test]
    fn the_alpha_crd_of_an_enabled_default_type_is_the_components() {
        for target in default_target_types() {
            let ftc = federated_type_config(&target, "kube-federation-system");
            let alpha = alpha_crd_for(&ftc, None).expect("an alpha twin");
            assert_eq!(
                alpha,
                flotilla_api::alpha::alpha_crd(&target, None),
                "{}",
                target.api.qualified_name()
            );
        }
    }

    #[test]
    fn a_type_federated_in_another_group_has_no_alpha_crd() {
        let mut ftc = federated_type_config(&default_target_types()[1], "kube-federation-system");
        ftc.spec.federated_type.group = "x.example.io".into();
        assert_eq!(alpha_crd_for(&ftc, None), None);
    }

    #[test]
    fn a_hand_named_federated_type_gets_no_alpha_crd_the_controller_would_miss() {
        let mut ftc = federated_type_config(&default_target_types()[1], "kube-federation-system");
        ftc.spec.federated_type.plural_name = "fedcms".into();
        assert_eq!(alpha_crd_for(&ftc, None), None);
    }
}
