//! Writes whose answer the caller does not read: the request kube's [`Api`] would send for
//! a patch, a status patch, a replace or a delete, with the successful answer's body read and dropped
//! instead of decoded.
//!
//! `Api::patch` decodes the whole object the API server returns (metadata, `managedFields`,
//! body) and `Api::delete` decodes it twice (once to tell an object from a `Status`); a
//! controller that only needs to know the write succeeded pays that for every write. Errors
//! are unchanged: a non-2xx answer is decoded as kube does it, into [`kube::Error::Api`] with
//! the server's code and message, so `404`, `409` and `422` handling stays as it was.

use std::fmt::Debug;

use http::Request;
use kube::{
    Api, Resource,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    core::Request as UrlBuilder,
};
use serde::{Deserialize, Serialize};

/// Which version of an object a write left: its uid and `metadata.generation` as the API
/// server answered (either may be absent from an answer).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Stamp {
    /// The object's uid.
    #[serde(default)]
    pub uid: Option<String>,
    /// Its `metadata.generation` (moved by spec changes only).
    #[serde(default)]
    pub generation: Option<i64>,
}

/// Patches `name`; only success or the API server's error is returned.
pub async fn patch<K: Resource + Clone, P: Serialize + Debug>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<()> {
    let req = UrlBuilder::new(api.resource_url()).patch(name, pp, patch);
    send(api, labelled(req, "patch")?).await
}

/// [`patch`], reading from the answer only which version the write left ([`Stamp`]); an
/// answer without readable metadata gives an empty stamp.
pub async fn patch_stamped<K: Resource + Clone, P: Serialize + Debug>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<Stamp> {
    let req = UrlBuilder::new(api.resource_url()).patch(name, pp, patch);
    let text = send_text(api, labelled(req, "patch")?).await?;
    Ok(stamp_of(&text))
}

/// The [`Stamp`] in an answer's `metadata` (empty when the answer has none).
fn stamp_of(answer: &str) -> Stamp {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        metadata: Stamp,
    }
    serde_json::from_str::<Answer>(answer).map_or_else(|_| Stamp::default(), |a| a.metadata)
}

/// Patches the status subresource of `name`; only success or the API server's error is
/// returned.
pub async fn patch_status<K: Resource + Clone, P: Serialize + Debug>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<()> {
    let req = UrlBuilder::new(api.resource_url()).patch_subresource("status", name, pp, patch);
    send(api, labelled(req, "patch_status")?).await
}

/// Replaces `name` with `obj` (checked against `obj`'s `metadata.resourceVersion`: a stale
/// one is the server's `409`); only success or the API server's error is returned.
pub async fn replace<K: Resource + Clone, T: Serialize>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    obj: &T,
) -> kube::Result<()> {
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let req = UrlBuilder::new(api.resource_url()).replace(name, pp, body);
    send(api, labelled(req, "replace")?).await
}

/// Deletes `name` (the deletion started or done); only success or the API server's error is
/// returned.
pub async fn delete<K: Resource + Clone>(
    api: &Api<K>,
    name: &str,
    dp: &DeleteParams,
) -> kube::Result<()> {
    let req = UrlBuilder::new(api.resource_url()).delete(name, dp);
    send(api, labelled(req, "delete")?).await
}

/// The built request, with the verb name kube's own methods attach for its tracing.
fn labelled(
    req: Result<Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<Request<Vec<u8>>> {
    let mut req = req.map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert(verb);
    Ok(req)
}

/// Sends `req` through `api`'s client; the body of a successful answer is read (so the
/// connection is reused) and dropped.
async fn send<K: Resource + Clone>(api: &Api<K>, req: Request<Vec<u8>>) -> kube::Result<()> {
    send_text(api, req).await.map(drop)
}

/// Sends `req` through `api`'s client; the body of a successful answer as text.
async fn send_text<K: Resource + Clone>(
    api: &Api<K>,
    req: Request<Vec<u8>>,
) -> kube::Result<String> {
    let client: kube::Client = api.clone().into();
    client.request_text(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::Preconditions;
    use serde_json::json;

    fn built(req: kube::Result<Request<Vec<u8>>>) -> Request<Vec<u8>> {
        req.expect("the request builds")
    }

    #[test]
    fn a_patch_is_the_request_kube_sends_for_it() {
        let url = "/api/v1/namespaces/ns/configmaps";
        let pp = PatchParams::apply("flotilla").force();
        let body = json!({"data": {"a": "1"}});
        let ours = built(labelled(
            UrlBuilder::new(url).patch("cm", &pp, &Patch::Apply(&body)),
            "patch",
        ));
        let kubes = UrlBuilder::new(url)
            .patch("cm", &pp, &Patch::Apply(&body))
            .expect("kube builds the request");
        assert_eq!(ours.method(), http::Method::PATCH);
        assert_eq!(ours.uri(), kubes.uri());
        assert_eq!(
            ours.uri().to_string(),
            "/api/v1/namespaces/ns/configmaps/cm?&force=true&fieldManager=flotilla"
        );
        assert_eq!(ours.headers(), kubes.headers());
        assert_eq!(ours.body(), kubes.body());
        assert_eq!(ours.extensions().get::<&'static str>(), Some(&"patch"));
    }

    #[test]
    fn a_stamp_is_read_from_the_answers_metadata_alone() {
        let answer = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "uid": "u-1", "generation": 4, "resourceVersion": "9",
                "managedFields": [{"manager": "flotilla"}]},
            "data": {"a": "1"}});
        let stamp = stamp_of(&answer.to_string());
        assert_eq!(stamp.uid.as_deref(), Some("u-1"));
        assert_eq!(stamp.generation, Some(4));
        let no_generation = json!({"metadata": {"uid": "u-2"}}).to_string();
        assert_eq!(stamp_of(&no_generation).generation, None);
        assert_eq!(stamp_of("not json"), Stamp::default());
        assert_eq!(stamp_of("{}"), Stamp::default());
    }

    #[test]
    fn a_status_patch_goes_to_the_status_subresource() {
        let req = built(labelled(
            UrlBuilder::new("/apis/types.kubefed.io/v1beta1/namespaces/ns/federatedconfigmaps")
                .patch_subresource(
                    "status",
                    "cm",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {}})),
                ),
            "patch_status",
        ));
        assert_eq!(req.method(), http::Method::PATCH);
        assert_eq!(
            req.uri().path(),
            "/apis/types.kubefed.io/v1beta1/namespaces/ns/federatedconfigmaps/cm/status"
        );
        assert_eq!(
            req.headers()
                .get(http::header::CONTENT_TYPE)
                .expect("a content type"),
            "application/merge-patch+json"
        );
    }

    #[test]
    fn a_replace_is_a_put_of_the_whole_object() {
        let pp = PostParams {
            field_manager: Some("flotilla-policy".into()),
            ..PostParams::default()
        };
        let obj = json!({"metadata": {"name": "cm", "resourceVersion": "7"}, "data": {}});
        let body = serde_json::to_vec(&obj).expect("serialises");
        let req = built(labelled(
            UrlBuilder::new("/api/v1/namespaces/ns/configmaps").replace("cm", &pp, body),
            "replace",
        ));
        assert_eq!(req.method(), http::Method::PUT);
        assert_eq!(req.uri().path(), "/api/v1/namespaces/ns/configmaps/cm");
        assert!(
            req.uri()
                .to_string()
                .contains("fieldManager=flotilla-policy")
        );
        let sent: serde_json::Value = serde_json::from_slice(req.body()).expect("a JSON body");
        assert_eq!(sent["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_delete_carries_its_preconditions_and_policy() {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
            }),
            ..DeleteParams::background()
        };
        let req = built(labelled(
            UrlBuilder::new("/api/v1/namespaces/ns/configmaps").delete("cm", &dp),
            "delete",
        ));
        assert_eq!(req.method(), http::Method::DELETE);
        assert_eq!(req.uri().path(), "/api/v1/namespaces/ns/configmaps/cm");
        let body: serde_json::Value = serde_json::from_slice(req.body()).expect("a JSON body");
        assert_eq!(body["propagationPolicy"], "Background");
        assert_eq!(body["preconditions"]["uid"], "u-1");
        assert_eq!(body["preconditions"]["resourceVersion"], "42");
    }
}
