//! The library's writes whose answer is not read (`flotilla_multicluster::unread`) against a
//! real API server: each write lands, and each refusal comes back as kube's `Error::Api`
//! with the server's code (404, 409, 422), which is what callers branch on.

use flotilla_localenv::testkit::TestClusters;
use flotilla_multicluster::unread;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde_json::json;

const NS: &str = "default";

fn code(result: kube::Result<()>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn writes_land_and_refusals_keep_the_servers_code() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start(1).await?;
    let client = kit.client("host").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("merged".into());
    let created = cms.create(&PostParams::default(), &cm).await?;

    // A merge patch and a server-side apply (which creates) land.
    let merge = Patch::Merge(json!({"data": {"a": "1"}}));
    unread::patch(&cms, "merged", &PatchParams::default(), &merge).await?;
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": NS}, "data": {"b": "2"}});
    let pp = PatchParams::apply("unread-test").force();
    unread::patch(&cms, "applied", &pp, &Patch::Apply(&applied)).await?;
    let merged = cms.get("merged").await?;
    assert_eq!(
        merged.data.unwrap_or_default().get("a").map(String::as_str),
        Some("1")
    );
    let applied = cms.get("applied").await?;
    assert_eq!(
        applied
            .data
            .unwrap_or_default()
            .get("b")
            .map(String::as_str),
        Some("2")
    );

    // Refusals: an object that is not there, a JSON patch whose test fails, a
    // subresource the kind does not have.
    assert_eq!(
        code(unread::patch(&cms, "absent", &PatchParams::default(), &merge).await),
        Some(404)
    );
    let failing_test: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/a", "value": "other"},
        {"op": "replace", "path": "/data/a", "value": "3"}
    ]))?;
    let (plain, json_patch) = (PatchParams::default(), Patch::<()>::Json(failing_test));
    let refused = unread::patch(&cms, "merged", &plain, &json_patch).await;
    assert_eq!(code(refused), Some(422));
    let no_status = unread::patch_status(&cms, "merged", &plain, &merge).await;
    assert_eq!(code(no_status), Some(404));

    // A status patch lands on the status subresource.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let condition = json!({"status": {"conditions": [
        {"type": "FlotillaUnreadTest", "status": "True", "reason": "Written", "message": "by a test"}
    ]}});
    unread::patch_status(
        &namespaces,
        NS,
        &PatchParams::default(),
        &Patch::Merge(&condition),
    )
    .await?;
    let ns = namespaces.get(NS).await?;
    let conditions = ns.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "FlotillaUnreadTest" && c.status == "True"),
        "{conditions:?}"
    );

    // A delete whose precondition does not hold is a conflict; with the right UID it
    // deletes; a second delete finds nothing.
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-its-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        code(unread::delete(&cms, "merged", &wrong).await),
        Some(409)
    );
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    unread::delete(&cms, "merged", &right).await?;
    assert!(cms.get_opt("merged").await?.is_none());
    assert_eq!(
        code(unread::delete(&cms, "merged", &DeleteParams::default()).await),
        Some(404)
    );
    kit.shutdown().await?;
    Ok(())
}
