//! Import Secrets left behind: a Secret the controller wrote (labelled) that an import of a
//! given name controls, but not the live import of that name — that one was deleted, or
//! deleted and created again. The Secret is owned by its import, so the garbage collector
//! removes it; a collector that missed the import's deletion (seen in the chaos soak after
//! host API server and etcd restarts) leaves it, still holding a token, for good. The
//! controller removes such Secrets itself whenever it reconciles the import's key.

use flotilla_api::{admiralty::ImportGroup, multicluster::SECRET_LABEL};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Preconditions},
};
use tracing::{info, warn};

use super::reconcile::{Ctx, Key};

/// `(name, uid)` of each Secret among `secrets` that the controller wrote for an import
/// named `key` of `group` other than the import `live` (its UID; `None`: there is none).
pub fn stale<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    group: ImportGroup,
    key: &Key,
    live: Option<&str>,
) -> Vec<(String, String)> {
    let ar = group.api_resource();
    secrets
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(key.0.as_str()))
        .filter(|s| s.labels().get(SECRET_LABEL).map(String::as_str) == Some("true"))
        .filter_map(|s| {
            let owner = s.owner_references().iter().find(|o| {
                o.controller == Some(true)
                    && o.kind == ar.kind
                    && o.api_version == ar.api_version
                    && o.name == key.1
            })?;
            (Some(owner.uid.as_str()) != live).then(|| (s.name_any(), s.uid().unwrap_or_default()))
        })
        .collect()
}

impl Ctx {
    /// Deletes the Secrets [`stale`] finds in the cache of import Secrets (each only if it
    /// is still the object seen: UID precondition). `false` when a deletion failed.
    pub(super) async fn remove_stale_secrets(&self, key: &Key, live: Option<&str>) -> bool {
        let cached = self.secrets.state();
        let found = stale(cached.iter().map(|s| s.as_ref()), self.group, key, live);
        let api: Api<Secret> = Api::namespaced(self.host.clone(), &key.0);
        let mut done = true;
        for (name, uid) in found {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => info!(secret = %name, "removed the Secret of an import that is gone"),
                // Gone already, or replaced by another object of that name.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => {
                    warn!(secret = %name, error = %e, "removing the Secret of an import that is gone failed");
                    done = false;
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(name: &str, labelled: bool, owner: (&str, &str, &str, bool)) -> Secret {
        let (kind, owner_name, uid, controller) = owner;
        let labels = if labelled {
            json!({SECRET_LABEL: "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({"metadata": {
            "name": name, "namespace": "foo", "uid": format!("s-{name}"), "labels": labels,
            "ownerReferences": [{"apiVersion": "multicluster.flotilla.io/v1alpha1",
                "kind": kind, "name": owner_name, "uid": uid, "controller": controller}]
        }}))
        .expect("valid secret")
    }

    #[test]
    fn only_the_labelled_secrets_of_another_import_of_that_name_are_stale() {
        const SAI: &str = "ServiceAccountImport";
        let secrets = [
            secret("x-kubeconfig", true, (SAI, "x", "old", true)),
            secret("x-kubeconfig-new", true, (SAI, "x", "new", true)),
            secret("y-kubeconfig", true, (SAI, "y", "other", true)),
            secret("unlabelled", false, (SAI, "x", "old", true)),
            secret("not-controller", true, (SAI, "x", "old", false)),
            secret("other-kind", true, ("ConfigMap", "x", "old", true)),
        ];
        let key: Key = ("foo".into(), "x".into());
        let names = |live| {
            stale(&secrets, ImportGroup::Flotilla, &key, live)
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Some("new")), ["x-kubeconfig"]);
        assert_eq!(names(None), ["x-kubeconfig", "x-kubeconfig-new"]);
        let elsewhere: Key = ("bar".into(), "x".into());
        assert!(stale(&secrets, ImportGroup::Flotilla, &elsewhere, None).is_empty());
        assert!(
            stale(&secrets, ImportGroup::Admiralty, &key, None).is_empty(),
            "another group's"
        );
        assert_eq!(
            stale(&secrets, ImportGroup::Flotilla, &key, Some("new"))[0].1,
            "s-x-kubeconfig",
            "the Secret's own UID, for the precondition"
        );
    }
}
