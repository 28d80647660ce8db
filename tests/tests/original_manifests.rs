//! The manifests the product was designed from work unchanged on real clusters named as
//! they name them (`cluster1`, `cluster2`): kubefed's alpha sample (a
//! `types.kubefed.k8s.io/v1alpha1` FederatedNamespace and FederatedDeployment with a dotted
//! override path) and Admiralty's ServiceAccountImport. Each step checks what the user
//! sees — member objects, per-cluster status, `flotilla status` / `diff`, Events — and
//! that bad input is reported on its own object only; an object in both kubefed API
//! versions is propagated once and handed over when one is deleted. The two share one
//! federation, each in namespaces of its own.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE,
    admiralty::{ADMIRALTY_NAMESPACE_LABEL, ADMIRALTY_NAMESPACE_VALUE, AnyImport, ImportGroup},
    alpha::ALPHA_TYPES_GROUP,
};
use flotilla_tests::{
    EnvOptions,
    assert::events_about,
    federation::{Federation, apply, bootstrap, federated, install_host, seeded_env},
    host::{FederatedRef, cluster_status},
    init_tracing,
    member::{deployments, replicas},
    scenario,
    scenarios::run_concurrently,
    wait::wait_absent,
    wait_for,
};
use flotilla_webhook as webhook;
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount},
        rbac::v1::{Role, RoleBinding},
    },
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::ApiResource,
};
use serde_json::{Value, json};

const NS: &str = "test-namespace";
const T: Duration = Duration::from_secs(60);

/// kubefed's alpha `example/sample1`, as its users have it (the issue's manifest, with the
/// selector and pod template its `...` stand for).
const ALPHA_NAMESPACE: &str = r#"
apiVersion: types.kubefed.k8s.io/v1alpha1
kind: FederatedNamespace
metadata:
  name: test-namespace
  namespace: test-namespace
spec:
  placement:
    clusters:
    - name: cluster2
    - name: cluster1
"#;

const ALPHA_DEPLOYMENT: &str = r#"
apiVersion: types.kubefed.k8s.io/v1alpha1
kind: FederatedDeployment
metadata: {name: test-deployment, namespace: test-namespace}
spec:
  template:
    metadata: {labels: {app: nginx}}
    spec:
      replicas: 3
      selector: {matchLabels: {app: nginx}}
      template:
        metadata: {labels: {app: nginx}}
        spec: {containers: [{image: nginx, name: nginx}]}
  placement:
    clusters: [{name: cluster2}, {name: cluster1}]
  overrides:
    - clusterName: cluster2
      clusterOverrides:
        - path: spec.replicas
          value: 5
"#;

/// Host + two members joined as `cluster1` and `cluster2`, kubefed's alpha CRDs and
/// Admiralty's ServiceAccountImport CRD installed (both opt-in).
async fn federation() -> anyhow::Result<Federation> {
    let mut boot = bootstrap();
    boot.kubefed_alpha = true;
    boot.admiralty_imports = true;
    let env = seeded_env(EnvOptions::with_members(2), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let mut members = Vec::new();
    for (i, member) in env.members().iter().enumerate() {
        members.push(
            boot.join_as(&host, member, &format!("cluster{}", i + 1))
                .await?,
        );
    }
    let cp = boot.start_control_plane(&host, members.len()).await?;
    Ok(Federation {
        control_plane: Some(cp),
        host,
        members,
        env,
    })
}

fn alpha(kind: &str, plural: &str) -> ApiResource {
    let mut ar = federated(kind, plural);
    ar.group = ALPHA_TYPES_GROUP.into();
    ar.version = "v1alpha1".into();
    ar.api_version = format!("{ALPHA_TYPES_GROUP}/v1alpha1");
    ar
}

fn yaml(text: &str) -> anyhow::Result<Value> {
    serde_saphyr::from_str(text).context("parsing a manifest")
}

/// The Deployment replicas in cluster1 and cluster2 (member1, member2), `None` when absent.
async fn member_replicas(fed: &Federation, name: &str) -> anyhow::Result<Vec<Option<i32>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        out.push(
            deployments(m, NS)
                .get_opt(name)
                .await?
                .as_ref()
                .and_then(replicas),
        );
    }
    Ok(out)
}

/// Runs `flotilla ARGS` in-process against the host; (exit code, output).
async fn flotilla(fed: &Federation, args: &[&str]) -> (u8, String) {
    let run = flotilla_tests::cli::run(fed, args).await;
    (run.code, run.out)
}

async fn setup(fed: &Federation) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(fed.host.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    namespaces
        .patch(NS, &PatchParams::apply("test"), &Patch::Apply(&ns))
        .await?;
    let fns = alpha("Namespace", "namespaces");
    apply(&fed.host, &fns, Some(NS), &yaml(ALPHA_NAMESPACE)?).await?;
    FederatedRef::new(&fed.host, &fns, NS, NS)
        .wait_propagated()
        .await?;
    Ok(())
}

/// kubefed's alpha sample and Admiralty's import share one federation: each sets up and
/// works in namespaces of its own (`test-namespace`, `foo`).
#[tokio::test]
async fn kubefeds_alpha_sample_and_admiraltys_import_on_one_federation() -> anyhow::Result<()> {
    init_tracing();
    let fed = federation().await?;
    run_concurrently(vec![
        scenario!(
            kubefeds_alpha_sample_propagates_reports_conflicts_and_bad_paths_and_deletes(&fed)
        ),
        scenario!(
            admiraltys_service_account_import_works_with_its_label_annotation_and_secret(&fed)
        ),
    ])
    .await;
    Ok(())
}

async fn kubefeds_alpha_sample_propagates_reports_conflicts_and_bad_paths_and_deletes(
    fed: &Federation,
) -> anyhow::Result<()> {
    setup(fed).await?;
    let fdeploy = alpha("Deployment", "deployments");
    apply(&fed.host, &fdeploy, Some(NS), &yaml(ALPHA_DEPLOYMENT)?).await?;
    let sample = FederatedRef::new(&fed.host, &fdeploy, NS, "test-deployment");
    let status = sample.wait_propagated().await?;
    for cluster in ["cluster1", "cluster2"] {
        let s = cluster_status(&status, cluster).context(cluster)?;
        ensure!(s.status.is_empty(), "{cluster}: {s:?}");
    }
    wait_for(T, "3 replicas in cluster1, 5 in cluster2", || async {
        let got = member_replicas(fed, "test-deployment").await?;
        ensure!(got == [Some(3), Some(5)], "{got:?}");
        Ok(())
    })
    .await?;

    // `flotilla status` and `flotilla diff` see the alpha object.
    let (code, out) = flotilla(
        fed,
        &["status", "federateddeployment/test-deployment", "-n", NS],
    )
    .await;
    ensure!(code == 0, "status: {out}");
    ensure!(
        out.contains("cluster1") && out.contains("cluster2"),
        "{out}"
    );
    ensure!(out.to_lowercase().contains(ALPHA_TYPES_GROUP), "{out}");
    let (code, out) = flotilla(
        fed,
        &["diff", "federateddeployment/test-deployment", "-n", NS],
    )
    .await;
    ensure!(
        code == 0,
        "an unchanged object has nothing to change: {code} {out}"
    );
    let mut changed = yaml(ALPHA_DEPLOYMENT)?;
    changed["spec"]["overrides"][0]["clusterOverrides"][0]["value"] = json!(6);
    let file = fed.env.dir().join("changed-alpha.yaml");
    std::fs::write(&file, serde_json::to_string(&changed)?)?;
    let (code, out) = flotilla(fed, &["diff", "-f", &file.display().to_string()]).await;
    ensure!(code == 1, "a changed override is a change: {code} {out}");
    ensure!(out.contains("cluster2") && out.contains('6'), "{out}");

    bad_paths_are_reported_on_their_object_only(fed, &fdeploy).await?;
    twins_propagate_once_and_report_the_conflict_on_both(fed, &sample).await?;
    deleting_the_alpha_twin_hands_the_members_to_v1beta1(fed, &fdeploy).await?;

    sample.delete().await?;
    sample.wait_gone(T).await?;
    for m in &fed.members {
        wait_absent(T, &deployments(m, NS), "test-deployment").await?;
    }
    Ok(())
}

/// A dotted path into a missing field and a malformed path: the cluster's status says
/// `ApplyOverridesFailed` with the path, the other cluster and the sample are untouched.
async fn bad_paths_are_reported_on_their_object_only(
    fed: &Federation,
    fdeploy: &ApiResource,
) -> anyhow::Result<()> {
    // A path into a missing field fails where it is applied (cluster2); a malformed one
    // makes the whole `overrides` invalid, so no cluster gets an object built from it.
    for (name, path, hint, cluster1) in [
        (
            "missing-field",
            "spec.strategy.rollingUpdate.maxSurge",
            "does not exist",
            "",
        ),
        (
            "malformed",
            "spec..replicas",
            "empty",
            "ApplyOverridesFailed",
        ),
    ] {
        let mut obj = yaml(ALPHA_DEPLOYMENT)?;
        obj["metadata"]["name"] = json!(name);
        obj["spec"]["overrides"][0]["clusterOverrides"][0] = json!({"path": path, "value": 5});
        apply(&fed.host, fdeploy, Some(NS), &obj).await?;
        let r = FederatedRef::new(&fed.host, fdeploy, NS, name);
        let status = r
            .wait_cluster_reasons(&[("cluster1", cluster1), ("cluster2", "ApplyOverridesFailed")])
            .await
            .with_context(|| format!("{name} ({path})"))?;
        let msg = cluster_status(&status, "cluster2").map(|c| c.message.clone());
        ensure!(
            msg.as_deref()
                .is_some_and(|m| m.contains(path) && m.contains(hint)),
            "{name}: {msg:?}"
        );
        let got = member_replicas(fed, name).await?;
        ensure!(
            got[1].is_none(),
            "{name}: nothing written to cluster2: {got:?}"
        );
        ensure!(
            got[0].is_some() == cluster1.is_empty(),
            "{name}: cluster1 has the object only when its overrides apply: {got:?}"
        );
        r.delete().await?;
        r.wait_gone(T).await?;
    }
    let got = member_replicas(fed, "test-deployment").await?;
    ensure!(
        got == [Some(3), Some(5)],
        "the sample is untouched: {got:?}"
    );
    Ok(())
}

/// A v1beta1 FederatedDeployment of the sample's name: the (older) alpha object keeps
/// propagating, both report `VersionConflict` with an Event; deleting the v1beta1 one
/// leaves the members alone.
async fn twins_propagate_once_and_report_the_conflict_on_both(
    fed: &Federation,
    sample: &FederatedRef,
) -> anyhow::Result<()> {
    // Creation timestamps count whole seconds and a tie goes to v1beta1: the twin must be
    // created in a later second than the sample to be the younger one.
    let created = (sample.get().await?.metadata.creation_timestamp)
        .context("the sample has a creation timestamp")?;
    while Timestamp::now().as_second() <= created.0.as_second() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let beta_ar = federated("Deployment", "deployments");
    let mut beta = yaml(ALPHA_DEPLOYMENT)?;
    beta["apiVersion"] = json!("types.kubefed.io/v1beta1");
    beta["spec"]["template"]["spec"]["replicas"] = json!(7);
    beta["spec"]["overrides"] = json!([]);
    apply(&fed.host, &beta_ar, Some(NS), &beta).await?;
    let twin = FederatedRef::new(&fed.host, &beta_ar, NS, "test-deployment");
    let c = twin.wait_not_propagated("VersionConflict").await?;
    ensure!(c.message.contains("propagates nothing"), "{c:?}");
    ensure!(
        twin.status().await?.clusters.is_empty(),
        "the v1beta1 twin places nothing"
    );
    let c = sample.wait_not_propagated("VersionConflict").await?;
    ensure!(c.message.contains("is the one propagated"), "{c:?}");
    wait_for(T, "a VersionConflict Event on each twin", || async {
        let events = events_about(&fed.host, NS, "test-deployment", "VersionConflict").await?;
        let mut on: Vec<String> = events
            .iter()
            .filter_map(|e| e.regarding.as_ref()?.api_version.clone())
            .collect();
        on.sort();
        on.dedup();
        ensure!(
            on == ["types.kubefed.io/v1beta1", "types.kubefed.k8s.io/v1alpha1"],
            "{on:?}"
        );
        Ok(())
    })
    .await?;
    let got = member_replicas(fed, "test-deployment").await?;
    ensure!(
        got == [Some(3), Some(5)],
        "propagated once, from the alpha object: {got:?}"
    );

    twin.delete().await?;
    twin.wait_gone(T).await?;
    sample.wait_propagated().await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = member_replicas(fed, "test-deployment").await?;
    ensure!(
        got == [Some(3), Some(5)],
        "deleting the yielding twin touches nothing: {got:?}"
    );
    Ok(())
}

/// Migrating: an alpha object propagating, its v1beta1 twin applied (it yields), the alpha
/// one deleted — the member objects stay (same UIDs) and follow the v1beta1 object from
/// then on; deleting that one deletes them.
async fn deleting_the_alpha_twin_hands_the_members_to_v1beta1(
    fed: &Federation,
    fdeploy: &ApiResource,
) -> anyhow::Result<()> {
    let name = "handover";
    let mut old = yaml(ALPHA_DEPLOYMENT)?;
    old["metadata"]["name"] = json!(name);
    apply(&fed.host, fdeploy, Some(NS), &old).await?;
    let alpha_ref = FederatedRef::new(&fed.host, fdeploy, NS, name);
    alpha_ref.wait_propagated().await?;
    // creationTimestamp has one-second resolution, and a tie goes to v1beta1.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let beta_ar = federated("Deployment", "deployments");
    let mut new = old.clone();
    new["apiVersion"] = json!("types.kubefed.io/v1beta1");
    new["spec"]["template"]["spec"]["replicas"] = json!(7);
    new["spec"]["overrides"] = json!([]);
    apply(&fed.host, &beta_ar, Some(NS), &new).await?;
    let beta_ref = FederatedRef::new(&fed.host, &beta_ar, NS, name);
    beta_ref.wait_not_propagated("VersionConflict").await?;
    let uids = member_uids(fed, name).await?;
    ensure!(uids.iter().all(Option::is_some), "{uids:?}");

    alpha_ref.delete().await?;
    alpha_ref.wait_gone(T).await?;
    beta_ref.wait_propagated().await?;
    wait_for(T, "7 replicas from the v1beta1 object", || async {
        let got = member_replicas(fed, name).await?;
        ensure!(got == [Some(7), Some(7)], "{got:?}");
        Ok(())
    })
    .await?;
    ensure!(
        member_uids(fed, name).await? == uids,
        "the member objects were kept, not recreated"
    );
    let events = events_about(&fed.host, NS, name, "HandedOver").await?;
    ensure!(
        !events.is_empty(),
        "a HandedOver Event on the deleted alpha object"
    );

    beta_ref.delete().await?;
    beta_ref.wait_gone(T).await?;
    for m in &fed.members {
        wait_absent(T, &deployments(m, NS), name).await?;
    }
    Ok(())
}

async fn member_uids(fed: &Federation, name: &str) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        out.push(
            deployments(m, NS)
                .get_opt(name)
                .await?
                .and_then(|d| d.metadata.uid),
        );
    }
    Ok(out)
}

/// Admiralty's ServiceAccountImport, verbatim.
const ADMIRALTY_IMPORT: &str = r#"
apiVersion: multicluster.admiralty.io/v1alpha1
kind: ServiceAccountImport
metadata: {name: foo-controller-remote-cluster1, namespace: foo}
spec: {clusterName: cluster1, namespace: foo, name: foo-controller-remote}
"#;

const FOO: &str = "foo";
const IMPORTS_ANNOTATION: &str = "multicluster.admiralty.io/service-account-import.name";

fn admiralty_imports(fed: &Federation) -> Api<AnyImport> {
    Api::namespaced_with(
        fed.host.clone(),
        FOO,
        &ImportGroup::Admiralty.api_resource(),
    )
}

async fn create<K>(api: &Api<K>, obj: Value) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

/// In the host, namespace `foo` with Admiralty's label; in each member, namespace `foo`
/// and the ServiceAccount `foo-controller-remote`, which may list ConfigMaps there and
/// nothing else, and a ConfigMap to list.
async fn admiralty_setup(fed: &Federation) -> anyhow::Result<()> {
    create(
        &Api::<Namespace>::all(fed.host.clone()),
        json!({"metadata": {"name": FOO, "labels": {ADMIRALTY_NAMESPACE_LABEL: ADMIRALTY_NAMESPACE_VALUE}}}),
    )
    .await?;
    for (i, m) in fed.members.iter().enumerate() {
        create(
            &Api::<Namespace>::all(m.clone()),
            json!({"metadata": {"name": FOO}}),
        )
        .await?;
        let sa = "foo-controller-remote";
        create(
            &Api::<ServiceAccount>::namespaced(m.clone(), FOO),
            json!({"metadata": {"name": sa}}),
        )
        .await?;
        create(
            &Api::<Role>::namespaced(m.clone(), FOO),
            json!({"metadata": {"name": "list-configmaps"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
        )
        .await?;
        create(
            &Api::<RoleBinding>::namespaced(m.clone(), FOO),
            json!({"metadata": {"name": sa},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "list-configmaps"},
                   "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": FOO}]}),
        )
        .await?;
        create(
            &Api::<ConfigMap>::namespaced(m.clone(), FOO),
            json!({"metadata": {"name": format!("in-cluster{}", i + 1)}}),
        )
        .await?;
    }
    // The ServiceAccount admission plugin rejects Pods until the default account exists.
    wait_for(T, "the default ServiceAccount", || async {
        Api::<ServiceAccount>::namespaced(fed.host.clone(), FOO)
            .get_opt("default")
            .await?
            .context("not yet")
    })
    .await?;
    Ok(())
}

async fn wait_import_reason(
    fed: &Federation,
    name: &str,
    reason: &str,
) -> anyhow::Result<AnyImport> {
    wait_for(T, &format!("import {name}: {reason}"), || async {
        let i = admiralty_imports(fed).get(name).await?;
        let got = i
            .status
            .as_ref()
            .and_then(|s| s.ready())
            .and_then(|c| c.reason.clone());
        ensure!(got.as_deref() == Some(reason), "reason is {got:?}");
        Ok(i)
    })
    .await
}

/// A client from nothing but the Secret's `data.config` kubeconfig.
async fn client_from(secret: &Secret) -> anyhow::Result<kube::Client> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .context("no data.config")?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes.0)?)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn admiraltys_service_account_import_works_with_its_label_annotation_and_secret(
    fed: &Federation,
) -> anyhow::Result<()> {
    admiralty_setup(fed).await?;
    let imports = admiralty_imports(fed);
    let verbatim: AnyImport = serde_json::from_value(yaml(ADMIRALTY_IMPORT)?)?;
    imports.create(&PostParams::default(), &verbatim).await?;
    let mut second = yaml(ADMIRALTY_IMPORT)?;
    second["metadata"]["name"] = json!("foo-controller-remote-cluster2");
    second["spec"]["clusterName"] = json!("cluster2");
    create(&imports, second).await?;
    let mut unknown = yaml(ADMIRALTY_IMPORT)?;
    unknown["metadata"]["name"] = json!("foo-controller-remote-cluster9");
    unknown["spec"]["clusterName"] = json!("cluster9");
    create(&imports, unknown).await?;

    let secrets: Api<Secret> = Api::namespaced(fed.host.clone(), FOO);
    for (i, name) in [
        "foo-controller-remote-cluster1",
        "foo-controller-remote-cluster2",
    ]
    .into_iter()
    .enumerate()
    {
        let ready = wait_import_reason(fed, name, "TokenIssued").await?;
        let secret_name = ready
            .status
            .and_then(|s| s.secret_name)
            .context("secretName")?;
        let secret = secrets.get(&secret_name).await?;
        let owner = &secret.metadata.owner_references.clone().unwrap_or_default()[0];
        ensure!(
            owner.api_version == "multicluster.admiralty.io/v1alpha1",
            "{owner:?}"
        );
        // The kubeconfig reaches its cluster as the remote ServiceAccount, and no further.
        let remote = client_from(&secret).await?;
        let cms = Api::<ConfigMap>::namespaced(remote.clone(), FOO)
            .list(&ListParams::default())
            .await?;
        let want = format!("in-cluster{}", i + 1);
        ensure!(
            cms.items
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(want.as_str())),
            "{name}"
        );
        let denied = Api::<Secret>::namespaced(remote, FOO)
            .list(&ListParams::default())
            .await;
        ensure!(
            matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
            "{name}: {denied:?}"
        );
    }
    // An unknown cluster is that import's reason, and only its.
    wait_import_reason(fed, "foo-controller-remote-cluster9", "ClusterNotFound").await?;
    ensure!(
        secrets
            .get_opt("foo-controller-remote-cluster9-kubeconfig")
            .await?
            .is_none(),
        "no Secret for an unknown cluster"
    );
    let events = events_about(
        &fed.host,
        FOO,
        "foo-controller-remote-cluster9",
        "ClusterNotFound",
    )
    .await?;
    ensure!(!events.is_empty(), "a Warning Event on the import");

    admiralty_pods_get_both_kubeconfigs(fed).await
}

/// The webhook, as `flotilla dev up` configures it: a Pod annotated the Admiralty way in
/// a namespace labelled the Admiralty way gets both imports mounted under Admiralty's root;
/// a Pod naming an import that does not exist is rejected, naming it.
async fn admiralty_pods_get_both_kubeconfigs(fed: &Federation) -> anyhow::Result<()> {
    let (_, serving) = webhook::local::start_local(fed.host.clone(), DEFAULT_NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(fed.host.clone(), FOO);
    let pod = |name: &str, imports: &str| {
        json!({
            "metadata": {"name": name, "annotations": {IMPORTS_ANNOTATION: imports}},
            "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]},
        })
    };
    let both = "foo-controller-remote-cluster1,foo-controller-remote-cluster2";
    let created = wait_for(T, "the webhook admitting a Pod", || async {
        create(&pods, pod("foo-controller", both)).await
    })
    .await?;
    let spec = created.spec.context("spec")?;
    let mounts = spec.containers[0].volume_mounts.clone().unwrap_or_default();
    for (cluster, secret) in [
        ("cluster1", "foo-controller-remote-cluster1-kubeconfig"),
        ("cluster2", "foo-controller-remote-cluster2-kubeconfig"),
    ] {
        let path = format!(
            "/var/run/secrets/admiralty.io/serviceaccountimports/foo-controller-remote-{cluster}/"
        );
        let mount = mounts
            .iter()
            .find(|m| m.mount_path == path)
            .with_context(|| format!("{path} in {mounts:?}"))?;
        ensure!(mount.read_only == Some(true), "{mount:?}");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .context("volume")?;
        let source = volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref());
        ensure!(source == Some(secret), "{volume:?}");
    }
    let rejected = create(&pods, pod("unknown", "foo-controller-remote-cluster1,nope")).await;
    match rejected {
        Err(e) => ensure!(format!("{e:#}").contains("nope"), "{e:#}"),
        Ok(p) => anyhow::bail!("a Pod naming an unknown import must be rejected: {p:?}"),
    }
    serving.abort();
    Ok(())
}
