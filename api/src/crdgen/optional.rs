//! The opt-in APIs: CRDs Flotilla serves but `config/` does not install, because they answer
//! to the same kubectl names as Flotilla's own (`crate::kubectl_names`) — kubefed's alpha
//! Federated&lt;Kind&gt; (`federatedconfigmaps` in `types.kubefed.k8s.io` beside
//! `types.kubefed.io`) and Admiralty's ServiceAccountImport (`serviceaccountimports` in
//! `multicluster.admiralty.io` beside `multicluster.flotilla.io`). Each is a kustomize
//! component in its own directory of `config/`, written by `crdgen`, and what
//! `flotilla enable --kubefed-alpha` / `--admiralty-imports` apply.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

use super::federated::{default_target_types, polish};
use super::{CrdGenError, GeneratedFile, crd_file_name, yaml_with_comment};

/// An API that is installed only when asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OptionalApi {
    /// kubefed's alpha `types.kubefed.k8s.io/v1alpha1` Federated&lt;Kind&gt; of the default
    /// types.
    KubefedAlpha,
    /// Admiralty's `multicluster.admiralty.io/v1alpha1` ServiceAccountImport.
    Admiralty,
}

impl OptionalApi {
    /// Every optional API.
    pub const ALL: [OptionalApi; 2] = [OptionalApi::KubefedAlpha, OptionalApi::Admiralty];

    /// Its name: the directory of its component under `config/`, and in messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            OptionalApi::KubefedAlpha => "kubefed-alpha",
            OptionalApi::Admiralty => "admiralty",
        }
    }

    /// The directory of its kustomize component, relative to the repository root.
    pub const fn dir(self) -> &'static str {
        match self {
            OptionalApi::KubefedAlpha => "config/kubefed-alpha",
            OptionalApi::Admiralty => "config/admiralty",
        }
    }

    /// Its CRDs, as the component holds them.
    pub fn crds(self) -> Vec<CustomResourceDefinition> {
        match self {
            OptionalApi::KubefedAlpha => default_target_types()
                .iter()
                .map(|t| crate::alpha::alpha_crd(t, None))
                .collect(),
            OptionalApi::Admiralty => vec![polish(crate::admiralty::admiralty_crd())],
        }
    }

    /// What the component's `kustomization.yaml` says about it, as comment lines.
    fn about(self) -> &'static str {
        match self {
            OptionalApi::KubefedAlpha => {
                "# Opt-in: kubefed's alpha API, types.kubefed.k8s.io/v1alpha1, for the default types.\n\
                 # Its plurals are v1beta1's too (federatedconfigmaps, ...): with both installed,\n\
                 # kubectl resolves a bare plural to one group only. Address each fully qualified\n\
                 # (federatedconfigmaps.types.kubefed.io, federatedconfigmaps.types.kubefed.k8s.io);\n\
                 # the short names (fcm, fdeploy, ...) stay v1beta1's. docs/api.md, \"Migrating\".\n"
            }
            OptionalApi::Admiralty => {
                "# Opt-in: Admiralty's ServiceAccountImport, multicluster.admiralty.io/v1alpha1.\n\
                 # Its plural and singular are Flotilla's too (serviceaccountimports): with both\n\
                 # installed, kubectl resolves them to one group only. Address Flotilla's as\n\
                 # serviceaccountimports.multicluster.flotilla.io or saimport, Admiralty's as\n\
                 # serviceaccountimports.multicluster.admiralty.io or sai. docs/api.md, \"Migrating\".\n"
            }
        }
    }

    /// The files of its component: one per CRD, and the `kustomization.yaml` listing them.
    pub fn component_files(self) -> Result<Vec<GeneratedFile>, CrdGenError> {
        let dir = self.dir();
        let mut files = Vec::new();
        let mut resources = Vec::new();
        for crd in self.crds() {
            let name = crd_file_name(&crd);
            files.push(yaml_with_comment(&format!("{dir}/{name}"), "", &crd)?);
            resources.push(name);
        }
        let component = json!({
            "apiVersion": "kustomize.config.k8s.io/v1alpha1",
            "kind": "Component",
            "resources": resources,
        });
        let usage = format!(
            "# Use: list {dir}/ under `components:` of an overlay of config/, or run\n\
             # `flotilla enable {}`.\n",
            self.flag()
        );
        files.push(yaml_with_comment(
            &format!("{dir}/{KUSTOMIZATION_FILE}"),
            &format!("{}{usage}", self.about()),
            &component,
        )?);
        Ok(files)
    }

    /// The `flotilla enable` flag that installs it.
    pub const fn flag(self) -> &'static str {
        match self {
            OptionalApi::KubefedAlpha => "--kubefed-alpha",
            OptionalApi::Admiralty => "--admiralty-imports",
        }
    }
}

/// The file of a kustomization or component, in its directory.
pub const KUSTOMIZATION_FILE: &str = "kustomization.yaml";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn each_component_lists_exactly_its_crd_files() {
        for api in OptionalApi::ALL {
            let files = api.component_files().expect("renders");
            let (kustomizations, crds): (Vec<_>, Vec<_>) = files
                .iter()
                .partition(|f| f.path.ends_with(&format!("/{KUSTOMIZATION_FILE}")));
            assert_eq!(kustomizations.len(), 1, "{api:?}");
            let component: Value =
                serde_saphyr::from_str(&kustomizations[0].contents).expect("yaml");
            assert_eq!(component["kind"], "Component");
            let listed: Vec<String> = component["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .map(|r| format!("{}/{}", api.dir(), r.as_str().expect("a path")))
                .collect();
            let written: Vec<String> = crds.iter().map(|f| f.path.clone()).collect();
            assert_eq!(listed, written, "{api:?}");
            assert_eq!(crds.len(), api.crds().len());
        }
    }

    #[test]
    fn the_alpha_component_holds_one_crd_per_default_type_and_admiraltys_one() {
        let alpha = OptionalApi::KubefedAlpha.crds();
        assert_eq!(alpha.len(), default_target_types().len());
        assert!(
            alpha
                .iter()
                .all(|c| c.spec.group == crate::alpha::ALPHA_TYPES_GROUP)
        );
        let admiralty = OptionalApi::Admiralty.crds();
        assert_eq!(
            admiralty[0].metadata.name.as_deref(),
            Some("serviceaccountimports.multicluster.admiralty.io")
        );
        assert_eq!(admiralty.len(), 1);
    }
}
