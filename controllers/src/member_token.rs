//! A push member's bound, rotating token: the namespaced Role that lets the member
//! credential request tokens of its own ServiceAccount and of no other, the TokenRequest
//! itself, and the host Secret that holds the token beside its rotation annotations
//! ([`flotilla_core::credential`]). `flotilla join`, `flotilla join --rotate-credentials`
//! and the registry's renewer ([`crate::registry::renewal`]) all go through here.
//!
//! A token is never logged, never put into an error, an Event or a status: [`Token`]
//! prints as `<redacted>`.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine as _;
use flotilla_api::FIELD_MANAGER;
use flotilla_core::credential::Rotation;
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{ConfigMap, Secret, ServiceAccount},
        rbac::v1::{Role, RoleBinding},
    },
    jiff::{Timestamp, Unit},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// A bearer token; its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The token itself, for the Secret it goes into.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Name of the Role (and RoleBinding) that lets the ServiceAccount `sa` renew its token.
pub fn renewal_role(sa: &str) -> String {
    format!("{sa}-token-renewal")
}

/// In the member's control-plane namespace: a Role allowing exactly `create` on
/// `serviceaccounts/token` of the ServiceAccount `sa`, bound to `sa`.
pub async fn ensure_renewal_role(member: &Client, ns: &str, sa: &str) -> Result<(), kube::Error> {
    let name = renewal_role(sa);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": [{
            "apiGroups": [""], "resources": ["serviceaccounts/token"],
            "resourceNames": [sa], "verbs": ["create"],
        }],
    });
    let roles: Api<Role> = Api::namespaced(member.clone(), ns);
    roles.patch(&name, &params, &Patch::Apply(&role)).await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
    });
    let bindings: Api<RoleBinding> = Api::namespaced(member.clone(), ns);
    bindings
        .patch(&name, &params, &Patch::Apply(&binding))
        .await?;
    Ok(())
}

/// Asks the member for a token of `namespace/sa` living `lifetime` (the member may grant
/// less; the expiry it answers is what counts), with whatever credential `member` holds.
pub async fn request(
    member: &Client,
    namespace: &str,
    sa: &str,
    lifetime: Duration,
) -> Result<(Token, Rotation), kube::Error> {
    let issued_at = Timestamp::now()
        .round(Unit::Second)
        .unwrap_or(Timestamp::now());
    let api: Api<ServiceAccount> = Api::namespaced(member.clone(), namespace);
    let body = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX)),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(sa, &PostParams::default(), &body)
        .await?;
    let status = answer
        .status
        .ok_or_else(|| kube::Error::Service("the TokenRequest answer has no status".into()))?;
    let rotation = Rotation {
        namespace: namespace.to_owned(),
        service_account: sa.to_owned(),
        lifetime,
        issued_at,
        expires_at: status.expiration_timestamp.0,
    };
    Ok((Token(status.token), rotation))
}

/// Writes the token and its rotation annotations into the host Secret `ns/name`
/// (server-side apply; the Secret's other fields are left alone).
pub async fn store(
    host: &Client,
    ns: &str,
    name: &str,
    token: &Token,
    rotation: &Rotation,
) -> Result<(), kube::Error> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(token.expose());
    let body = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns, "annotations": rotation.annotations()},
        "data": {"token": encoded},
    });
    let secrets: Api<Secret> = Api::namespaced(host.clone(), ns);
    secrets
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}

/// The member's root CA as every namespace's `kube-root-ca.crt` ConfigMap holds it (what
/// the token Secret's `ca.crt` used to give), when there is one.
pub async fn member_ca(member: &Client, ns: &str) -> Result<Option<String>, kube::Error> {
    let maps: Api<ConfigMap> = Api::namespaced(member.clone(), ns);
    Ok(maps
        .get_opt("kube-root-ca.crt")
        .await?
        .and_then(|m| m.data)
        .and_then(|d: BTreeMap<String, String>| d.get("ca.crt").cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let token = Token("s3cr3t".into());
        assert!(!format!("{token:?}").contains("s3cr3t"));
        assert_eq!(token.expose(), "s3cr3t");
    }
}
