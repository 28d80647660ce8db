//! The second resource model end to end: plain manifests applied to the host with `kubectl`
//! as they are, selected by PropagationPolicies and changed per cluster by
//! OverridePolicies — on a host that stores workload templates without running them.
//! Each scenario has its own namespace on one shared federation.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::policy::{OverridePolicy, PropagationPolicy};
use flotilla_tests::{
    federation::{Federation, federation_for_templates},
    member::{config_maps, deployments, first_image, replicas},
    scenario,
    scenarios::run_concurrently,
    wait_for,
};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

mod migration;
use migration::{
    a_replica_scheduling_preference_divides_a_policy_made_deployment,
    federated_objects_are_taken_over_without_member_writes,
};

const T: Duration = Duration::from_secs(60);

/// `kubectl ARGS` against the host, `input` on its standard input.
fn kubectl(fed: &Federation, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    flotilla_tests::kubectl::host(fed, args, input)
}

fn apply(fed: &Federation, ns: &str, yaml: &str) -> anyhow::Result<()> {
    kubectl(fed, &["apply", "-n", ns, "-f", "-"], Some(yaml)).map(|_| ())
}

async fn namespace(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(fed.host.clone());
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    api.patch(
        ns,
        &PatchParams::apply("flotilla-tests"),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

/// A small web application as plain manifests, in the shape of the Kubernetes
/// documentation's examples: a Deployment, its Service, ConfigMap, Secret and ServiceAccount.
const APP: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels:
    app: web
data:
  greeting: hello
---
apiVersion: v1
kind: Secret
metadata:
  name: web-credentials
  labels:
    app: web
type: Opaque
stringData:
  password: s3cr3t
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      serviceAccountName: web
      containers:
      - name: web
        image: registry.example/team/web:1.0
        ports:
        - containerPort: 8080
        envFrom:
        - configMapRef:
            name: web-config
"#;

const POLICY: &str = r#"
apiVersion: policy.flotilla.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  - {apiVersion: v1, kind: Service, name: web}
  - {apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {app: web}}}
  - {apiVersion: v1, kind: Secret, labelSelector: {matchLabels: {app: web}}}
  - {apiVersion: v1, kind: ServiceAccount, name: web}
  placement:
    clusters: [{name: member1}, {name: member2}]
"#;

const OVERRIDES: &str = r#"
apiVersion: policy.flotilla.io/v1alpha1
kind: OverridePolicy
metadata:
  name: web-member2
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
  - targetCluster: {clusterNames: [member2]}
    overriders:
      imageOverrider:
      - {component: Tag, value: "1.1"}
      plaintext:
      - {path: /spec/replicas, operator: replace, value: 3}
"#;

#[tokio::test]
async fn plain_manifests_propagate_through_policies() -> anyhow::Result<()> {
    let fed = federation_for_templates(2).await?;
    let fed = &fed;
    run_concurrently(vec![
        scenario!(an_application_applied_as_it_is_reaches_its_clusters_with_overrides(fed)),
        scenario!(a_policy_change_moves_and_a_deletion_removes_or_keeps_the_copies(fed)),
        scenario!(
            the_highest_priority_wins_and_an_explicit_federated_object_beats_every_policy(fed)
        ),
        scenario!(bad_policies_are_reported_and_others_keep_working(fed)),
        scenario!(federated_objects_are_taken_over_without_member_writes(fed)),
        scenario!(a_replica_scheduling_preference_divides_a_policy_made_deployment(fed)),
    ])
    .await;
    Ok(())
}

async fn an_application_applied_as_it_is_reaches_its_clusters_with_overrides(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "app";
    namespace(fed, ns).await?;
    apply(fed, ns, APP)?;
    apply(fed, ns, POLICY)?;
    apply(fed, ns, OVERRIDES)?;
    for (i, member) in fed.members.iter().enumerate() {
        let d = deployments(member, ns);
        let want = if i == 0 {
            ("registry.example/team/web:1.0", 2)
        } else {
            ("registry.example/team/web:1.1", 3)
        };
        wait_for(T, "the Deployment with its cluster's overrides", || async {
            let dep = d.get("web").await?;
            ensure!(
                first_image(&dep) == Some(want.0) && replicas(&dep) == Some(want.1),
                "{:?} {:?}",
                first_image(&dep),
                replicas(&dep)
            );
            Ok(())
        })
        .await?;
        wait_for(
            T,
            "the Service, ServiceAccount, ConfigMap and Secret",
            || async {
                Api::<Service>::namespaced(member.clone(), ns)
                    .get("web")
                    .await?;
                Api::<ServiceAccount>::namespaced(member.clone(), ns)
                    .get("web")
                    .await?;
                let cm = config_maps(member, ns).get("web-config").await?;
                ensure!(
                    cm.data
                        .unwrap_or_default()
                        .get("greeting")
                        .map(String::as_str)
                        == Some("hello")
                );
                Api::<Secret>::namespaced(member.clone(), ns)
                    .get("web-credentials")
                    .await?;
                Ok(())
            },
        )
        .await?;
    }
    // The host stores the template but runs nothing of it; its status is the fleet's.
    let host_rs: Api<ReplicaSet> = Api::namespaced(fed.host.clone(), ns);
    ensure!(
        host_rs.list(&ListParams::default()).await?.items.is_empty(),
        "the host runs the Deployment"
    );
    let host_dep: Api<Deployment> = Api::namespaced(fed.host.clone(), ns);
    wait_for(T, "the fleet's status on the host's Deployment", || async {
        let s = host_dep.get("web").await?.status.context("status")?;
        ensure!(
            s.ready_replicas == Some(5) && s.replicas == Some(5),
            "{s:?}"
        );
        Ok(())
    })
    .await?;
    let table = kubectl(fed, &["get", "deployments", "-n", ns], None)?;
    ensure!(
        table
            .lines()
            .any(|l| l.starts_with("web ") && l.contains("5/2")),
        "{table}"
    );
    // Per-cluster status one command away, by the plain kind's name.
    let per_cluster =
        flotilla_tests::cli::run_ok(fed, &["status", "deployment/web", "-n", ns]).await?;
    ensure!(
        per_cluster.contains("member1") && per_cluster.contains("member2"),
        "{per_cluster}"
    );
    // The policy's status is written in passes after the decisions settle.
    wait_for(T, "the policy's status: 5 selected, Ready", || async {
        let pp = kubectl(
            fed,
            &["get", "propagationpolicies", "-n", ns, "-o", "json"],
            None,
        )?;
        ensure!(pp.contains("\"selectedCount\": 5"), "{pp}");
        let short = kubectl(fed, &["get", "pp", "web", "-n", ns], None)?;
        ensure!(short.contains("True"), "{short}");
        Ok(())
    })
    .await?;
    // Drift in a member is repaired, as for any federated object.
    let d1 = deployments(&fed.members[0], ns);
    d1.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 7}})),
    )
    .await?;
    wait_for(T, "the drift repaired", || async {
        ensure!(replicas(&d1.get("web").await?) == Some(2));
        Ok(())
    })
    .await?;
    // Deleting the native object deletes its copies.
    kubectl(fed, &["delete", "configmap", "web-config", "-n", ns], None)?;
    for member in &fed.members {
        let api = config_maps(member, ns);
        wait_for(T, "the ConfigMap gone from the member", || async {
            ensure!(api.get_opt("web-config").await?.is_none());
            Ok(())
        })
        .await?;
    }
    Ok(())
}

async fn a_policy_change_moves_and_a_deletion_removes_or_keeps_the_copies(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "moves";
    namespace(fed, ns).await?;
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {tier: x}}\ndata: {k: v}\n",
    )?;
    let policy = |clusters: &str, preserve: bool| {
        format!(
            "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: cms}}\nspec:\n  resourceSelectors: [{{apiVersion: v1, kind: ConfigMap, labelSelector: {{matchLabels: {{tier: x}}}}}}]\n  placement: {{clusters: [{clusters}]}}\n  preserveResourcesOnDeletion: {preserve}\n"
        )
    };
    apply(fed, ns, &policy("{name: member1}, {name: member2}", false))?;
    let (m1, m2) = (
        config_maps(&fed.members[0], ns),
        config_maps(&fed.members[1], ns),
    );
    wait_for(T, "a in both members", || async {
        ensure!(m1.get_opt("a").await?.is_some() && m2.get_opt("a").await?.is_some());
        Ok(())
    })
    .await?;
    apply(fed, ns, &policy("{name: member1}", true))?;
    wait_for(T, "a moved off member2", || async {
        ensure!(m1.get_opt("a").await?.is_some() && m2.get_opt("a").await?.is_none());
        Ok(())
    })
    .await?;
    // A policy that asked to keep its copies leaves them when it is deleted.
    kubectl(fed, &["delete", "propagationpolicy", "cms", "-n", ns], None)?;
    let fcm: Api<kube::api::DynamicObject> = Api::namespaced_with(
        fed.host.clone(),
        ns,
        &flotilla_tests::federation::federated("ConfigMap", "configmaps"),
    );
    wait_for(T, "the Federated object released", || async {
        ensure!(fcm.get_opt("a").await?.is_none());
        Ok(())
    })
    .await?;
    let kept = m1.get("a").await?;
    ensure!(
        !kept.labels().contains_key("kubefed.io/managed"),
        "kept but no longer managed: {:?}",
        kept.labels()
    );
    // Without it, deleting the policy removes them.
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, labels: {tier: x}}\ndata: {k: v}\n",
    )?;
    apply(fed, ns, &policy("{name: member2}", false))?;
    wait_for(T, "b in member2", || async {
        ensure!(m2.get_opt("b").await?.is_some());
        Ok(())
    })
    .await?;
    kubectl(fed, &["delete", "pp", "cms", "-n", ns], None)?;
    wait_for(T, "b removed from member2", || async {
        ensure!(m2.get_opt("b").await?.is_none());
        Ok(())
    })
    .await?;
    Ok(())
}

async fn the_highest_priority_wins_and_an_explicit_federated_object_beats_every_policy(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "priority";
    namespace(fed, ns).await?;
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n",
    )?;
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine}\ndata: {k: v}\n",
    )?;
    let pp = |name: &str, prio: i32, cluster: &str| {
        format!(
            "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: {prio}\n  resourceSelectors: [{{apiVersion: v1, kind: ConfigMap}}]\n  placement: {{clusters: [{{name: {cluster}}}]}}\n"
        )
    };
    // The user's own Federated object for `mine`, placed nowhere.
    apply(
        fed,
        ns,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata: {name: mine}\nspec:\n  template: {data: {k: explicit}}\n  placement: {clusters: []}\n",
    )?;
    apply(fed, ns, &pp("low", 1, "member1"))?;
    apply(fed, ns, &pp("high", 10, "member2"))?;
    let (m1, m2) = (
        config_maps(&fed.members[0], ns),
        config_maps(&fed.members[1], ns),
    );
    wait_for(T, "c where the high-priority policy puts it", || async {
        ensure!(m2.get_opt("c").await?.is_some() && m1.get_opt("c").await?.is_none());
        Ok(())
    })
    .await?;
    let pps: Api<PropagationPolicy> = Api::namespaced(fed.host.clone(), ns);
    wait_for(T, "the losing policy says so", || async {
        let s = pps.get("low").await?.status.context("status")?;
        ensure!(
            s.conflicts
                .iter()
                .any(|c| c.object.name == "c" && c.reason == "LostToPolicy"),
            "{s:?}"
        );
        let h = pps.get("high").await?.status.context("status")?;
        ensure!(
            h.conflicts
                .iter()
                .any(|c| c.object.name == "mine" && c.reason == "ExplicitFederatedObject"),
            "{h:?}"
        );
        Ok(())
    })
    .await?;
    ensure!(
        m2.get_opt("mine").await?.is_none(),
        "the explicit object's empty placement holds"
    );
    Ok(())
}

async fn bad_policies_are_reported_and_others_keep_working(fed: &Federation) -> anyhow::Result<()> {
    let ns = "bad";
    namespace(fed, ns).await?;
    apply(
        fed,
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\ndata: {k: v}\n",
    )?;
    apply(
        fed,
        ns,
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: unknown}\nspec:\n  resourceSelectors: [{apiVersion: example.com/v1, kind: Gadget}]\n",
    )?;
    apply(
        fed,
        ns,
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: good}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: ok}]\n  placement: {clusterSelector: {}}\n",
    )?;
    apply(
        fed,
        ns,
        "apiVersion: policy.flotilla.io/v1alpha1\nkind: OverridePolicy\nmetadata: {name: broken}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: ok}]\n  overrideRules:\n  - targetCluster: {clusterNames: [member1]}\n    overriders:\n      plaintext: [{path: /spec/nothing/here, operator: replace, value: 1}]\n",
    )?;
    let pps: Api<PropagationPolicy> = Api::namespaced(fed.host.clone(), ns);
    let ops: Api<OverridePolicy> = Api::namespaced(fed.host.clone(), ns);
    wait_for(T, "both bad policies reported", || async {
        let u = pps.get("unknown").await?.status.context("status")?;
        ensure!(
            u.conditions
                .iter()
                .any(|c| c.reason == "UnknownKind" && c.message.contains("Gadget")),
            "{u:?}"
        );
        let b = ops.get("broken").await?.status.context("status")?;
        ensure!(
            b.conditions
                .iter()
                .any(|c| c.reason == "InvalidOverride" && c.message.contains("/spec/nothing/here")),
            "{b:?}"
        );
        Ok(())
    })
    .await?;
    // The broken override blocks its object; fixing it lets it through.
    ops.delete("broken", &DeleteParams::default()).await?;
    for member in &fed.members {
        let api = config_maps(member, ns);
        wait_for(T, "the good policy's object propagated", || async {
            let cm: ConfigMap = api.get("ok").await?;
            ensure!(cm.data.unwrap_or_default().get("k").map(String::as_str) == Some("v"));
            Ok(())
        })
        .await?;
    }
    Ok(())
}
