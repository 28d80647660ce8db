//! Preparing a run, unmeasured: namespaces, the federated benchmark namespace, and
//! warm-up writes so that no measured part pays the API servers' and clients' warm-up.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{
    BENCH_LABEL, FED_NS, MANAGER, RAW_NS,
    run::Run,
    workload::{Kind, Starts, federated_namespace, to_kube, write_all},
};

/// Objects per member written and deleted before measuring, so that no part pays the API
/// servers' and clients' warm-up.
const WARMUP_OBJECTS: usize = 50;

/// Creates namespace `name` (server-side apply; nothing when it exists).
pub(super) async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
    )
    .await
    .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Calls `check` every 50 ms until it returns true; fails after `timeout` with the last
/// error, saying what was awaited.
pub(super) async fn poll<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("waiting for {what}")));
            }
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates and deletes some objects straight in every member, unmeasured.
pub(super) async fn warm_up_raw(run: &Run) -> anyhow::Result<()> {
    let names: Vec<String> = (0..WARMUP_OBJECTS).map(|i| format!("warmup-{i}")).collect();
    let ar = Kind::ConfigMap.target();
    for client in &run.members {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), RAW_NS, &ar);
        let starts = Starts::default();
        write_all(&names, run.concurrency, &starts, |n| {
            let api = api.clone();
            async move {
                let mut o = Kind::ConfigMap.raw_object(&n, "0").map_err(to_kube)?;
                o.labels_mut().insert(BENCH_LABEL.into(), "warmup".into());
                api.create(&PostParams::default(), &o).await.map(|_| ())
            }
        })
        .await?;
        write_all(&names, run.concurrency, &starts, |n| {
            let api = api.clone();
            async move { api.delete(&n, &DeleteParams::default()).await.map(|_| ()) }
        })
        .await?;
    }
    Ok(())
}

/// The benchmark namespace, federated to every member.
pub(super) async fn federate_namespace(run: &Run) -> anyhow::Result<()> {
    let ar = federated_namespace();
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &ar);
    let object = json!({
        "apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": FED_NS, "namespace": FED_NS},
        "spec": {"template": {}, "placement": {"clusterSelector": {}}},
    });
    // Retried: right after a large fleet's control plane starts, its first lists of every
    // member can keep the shared etcd so busy that the host answers 500 (deadline exceeded).
    poll(run.timeout, "the FederatedNamespace created", || async {
        let params = PatchParams::apply(MANAGER).force();
        api.patch(FED_NS, &params, &Patch::Apply(&object))
            .await
            .context("creating the FederatedNamespace")?;
        Ok(true)
    })
    .await?;
    for client in &run.members {
        let ns: Api<Namespace> = Api::all(client.clone());
        poll(
            run.timeout,
            "the federated namespace in every member",
            || async { Ok(ns.get_opt(FED_NS).await?.is_some()) },
        )
        .await?;
    }
    Ok(())
}

/// One federated object through its life, unmeasured: the controller of the kind runs and
/// its member caches are synced before anything is timed.
pub(super) async fn warm_up_federated(run: &Run, kind: Kind) -> anyhow::Result<()> {
    let name = format!("{}-warmup", kind.prefix());
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let mut obj = kind.federated_object(FED_NS, &name, "0")?;
    obj.labels_mut().insert(BENCH_LABEL.into(), "warmup".into());
    api.create(&PostParams::default(), &obj)
        .await
        .context("creating the warm-up object")?;
    let member_apis: Vec<Api<DynamicObject>> = run
        .members
        .iter()
        .map(|c| Api::namespaced_with(c.clone(), FED_NS, &kind.target()))
        .collect();
    poll(
        run.timeout,
        "the warm-up object in every member",
        || async {
            for m in &member_apis {
                if m.get_opt(&name).await?.is_none() {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;
    api.delete(&name, &DeleteParams::default()).await?;
    poll(run.timeout, "the warm-up object gone", || async {
        Ok(api.get_opt(&name).await?.is_none())
    })
    .await
}
