//! The object page's Replicas section on real clusters of unequal room (member1 one node of
//! 2 CPUs, member2 one of 8), seen through a real headless browser: a FederatedDeployment of
//! pods requesting 500m CPU divided by a ReplicaSchedulingPreference, its page showing per
//! cluster exactly the replicas, reason, numbers and capacity the RSP's status records (read
//! through the API, not assumed), and following by itself, without a reload, as the division
//! changes: kubefed's overflow past member1's capacity estimate, a smaller total, a division
//! by the replicas that fit each member (`AvailableReplicas`), and member1 left out by the
//! target's clusterSelector. The overview's Clusters table shows each member's resource
//! summary as its KubeFedCluster status has it.
//!
//! A screenshot of the section is written beside the clusters' files, and to `docs/images/`
//! when `FLOTILLA_DASHBOARD_SCREENSHOTS=1`.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::KubeFedCluster;
use flotilla_cli::Context;
use flotilla_tests::{
    browser::Browser,
    cli::start_dashboard,
    federation::{Federation, apply, federated_namespace, federation_of_2_and_8_cpus},
    objects::FederatedObject,
    objects::rsp_resource,
    wait::wait_namespace_in,
    wait_for,
};
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

const NS: &str = "dash-replicas";
/// How long a division may take: the estimate's threshold (5 s), the scheduler's write, the
/// members' pods, the page's refetch.
const SETTLED: Duration = Duration::from_secs(120);

/// The FederatedDeployment `web`, its pods requesting 500m CPU each.
fn web() -> FederatedObject {
    FederatedObject::deployment(NS, "web", 1, "nginx").template(json!({"spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx",
                "resources": {"requests": {"cpu": "500m"}}}]}}
    }}))
}

/// The RSP `web` as the host has it.
async fn rsp(fed: &Federation) -> anyhow::Result<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), NS, &rsp_resource());
    Ok(api.get("web").await?.data)
}

async fn patch_rsp(fed: &Federation, spec: Value) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), NS, &rsp_resource());
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await?;
    Ok(())
}

/// The Replicas table's rows as the page shows them: the cluster, then the text of each
/// cell (replicas, reason, why, preference, capacity estimate, available replicas).
async fn shown_rows(browser: &Browser) -> anyhow::Result<Vec<Vec<String>>> {
    let rows = browser
        .execute(
            "return Array.from(document.querySelectorAll('#division tbody tr')).map(tr =>
                [tr.dataset.cluster].concat(Array.from(tr.querySelectorAll('td'))
                    .map(td => td.textContent.trim())));",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(rows)?)
}

/// What the page must show for the RSP `rsp`: per cluster of its status, the recorded
/// replicas, reason, message and capacity, and the weight its spec gives the cluster.
fn expected_rows(rsp: &Value) -> Vec<(Vec<String>, String)> {
    let number = |v: &Value| v.as_i64().map_or("–".to_owned(), |n| n.to_string());
    let prefs = &rsp["spec"]["clusters"];
    rsp["status"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let name = d["name"].as_str().unwrap_or_default();
            let pref = match &prefs[name] {
                Value::Null => &prefs["*"],
                p => p,
            };
            let cells = vec![
                name.to_owned(),
                number(&d["replicas"]),
                d["reason"].as_str().unwrap_or_default().to_owned(),
                d["message"].as_str().unwrap_or_default().to_owned(),
                number(&d["capacityEstimate"]),
                number(&d["availableReplicas"]),
            ];
            (
                cells,
                format!("weight {}", pref["weight"].as_i64().unwrap_or(0)),
            )
        })
        .collect()
}

/// Waits until the RSP's status satisfies `settled` and the page shows exactly that
/// division, recorded, with nothing else pending; returns the status' clusters.
async fn page_shows_the_recorded_division(
    browser: &Browser,
    fed: &Federation,
    what: &str,
    settled: impl Fn(&[Value]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Value>> {
    wait_for(SETTLED, what, || async {
        let rsp = rsp(fed).await?;
        let recorded = rsp["status"]["clusters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        settled(&recorded).with_context(|| format!("status {recorded:?}"))?;
        let shown = shown_rows(browser).await?;
        let expected = expected_rows(&rsp);
        ensure!(
            shown.len() == expected.len(),
            "shown {shown:?}, status {rsp}"
        );
        for (row, (cells, weight)) in shown.iter().zip(&expected) {
            let mut rest = row.clone();
            let preference = if rest.len() > 4 {
                rest.remove(4)
            } else {
                String::new()
            };
            ensure!(&rest == cells, "shown {row:?}, status says {cells:?}");
            ensure!(
                preference.starts_with(weight.as_str()),
                "preference {preference:?}, spec gives {weight}"
            );
        }
        let source = browser.text("#division-source").await?.unwrap_or_default();
        ensure!(source.contains("recorded"), "{source:?}");
        let next = browser.text("#division-next").await?;
        ensure!(next.is_none(), "a division still pending: {next:?}");
        Ok(recorded)
    })
    .await
}

fn field<'a>(division: &'a [Value], cluster: &str, key: &str) -> &'a Value {
    division
        .iter()
        .find(|d| d["name"] == cluster)
        .map_or(&Value::Null, |d| &d[key])
}

/// The sum of the replicas a division writes.
fn written(division: &[Value]) -> i64 {
    division.iter().filter_map(|d| d["replicas"].as_i64()).sum()
}

/// The overview's Clusters table shows each member's resource summary as its KubeFedCluster
/// status has it (requested of allocatable CPU, the pods).
async fn overview_shows_each_members_summary(
    browser: &Browser,
    fed: &Federation,
) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), "kube-federation-system");
    for member in ["member1", "member2"] {
        wait_for(SETTLED, &format!("{member}'s summary"), || async {
            let r = clusters.get(member).await?.status.and_then(|s| s.resources);
            let r = r.context("no summary yet")?;
            let cpu = |m: &std::collections::BTreeMap<String, String>| {
                m.get("cpu").cloned().unwrap_or_else(|| "?".into())
            };
            let want = [
                format!("cpu {}/{}", cpu(&r.requested), cpu(&r.allocatable)),
                format!("{} pods", r.pods),
            ];
            let selector =
                format!(r#"#clusters tr[data-cluster="{member}"] td[data-col="capacity"]"#);
            let shown = browser.text(&selector).await?.unwrap_or_default();
            ensure!(
                want.iter().all(|w| shown.contains(w.as_str())),
                "shown {shown:?}, status {want:?}"
            );
            Ok(())
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_object_page_shows_each_clusters_replicas_and_reason_as_the_rsp_records_them_live()
-> anyhow::Result<()> {
    let fed = federation_of_2_and_8_cpus().await?;
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;
    let ctx = Context::captured();
    let url = start_dashboard(&fed, &ctx).await?;
    let browser = Browser::start().await?;
    let steps = async {
        web().apply(&fed.host).await?;
        apply(
            &fed.host,
            &rsp_resource(),
            Some(NS),
            &json!({"apiVersion": "scheduling.kubefed.io/v1alpha1",
                "kind": "ReplicaSchedulingPreference",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 10,
                    "rebalance": true,
                    "clusters": {"member1": {"weight": 2}, "*": {"weight": 1}}}}),
        )
        .await?;
        browser
            .goto(&format!(
                "{url}object?ns={NS}&kind=FederatedDeployment&name=web"
            ))
            .await?;
        browser.resize(1400, 1100).await?;
        browser
            .execute("window.flotillaMarker = 'kept'; return null;", vec![])
            .await?;

        // Weights 2:1 ask more of member1 than its 2 CPUs hold: past the threshold its
        // capacity estimate caps it and kubefed's overflow goes to member2.
        let overflow = page_shows_the_recorded_division(
            &browser,
            &fed,
            "member1 capped by its capacity estimate",
            |d| {
                ensure!(
                    field(d, "member1", "reason") == "CapacityEstimate"
                        && field(d, "member1", "capacityEstimate").is_i64(),
                    "no estimate yet"
                );
                Ok(())
            },
        )
        .await?;
        browser
            .execute(
                "document.getElementById('replicas').scrollIntoView(); return null;",
                vec![],
            )
            .await?;
        crate::dashboard::save_screenshot(&browser, &fed, "dashboard-replicas.png").await?;

        // A smaller total: the page follows the new division by itself.
        patch_rsp(&fed, json!({"totalReplicas": 4})).await?;
        let smaller = page_shows_the_recorded_division(&browser, &fed, "4 replicas", |d| {
            ensure!(written(d) == 4, "not the new total yet");
            Ok(())
        })
        .await?;
        ensure!(smaller != overflow, "the division did not change");

        // Weighed by the replicas that fit each member's free room instead.
        patch_rsp(&fed, json!({"weightPreference": "AvailableReplicas"})).await?;
        page_shows_the_recorded_division(&browser, &fed, "division by available replicas", |d| {
            for member in ["member1", "member2"] {
                ensure!(
                    field(d, member, "availableReplicas").is_i64(),
                    "no available replicas for {member} yet"
                );
            }
            ensure!(written(d) == 4, "not the total");
            Ok(())
        })
        .await?;

        // member1 no longer matches the target's clusterSelector: none there, and why.
        let clusters: Api<KubeFedCluster> =
            Api::namespaced(fed.host.clone(), "kube-federation-system");
        let label = json!({"metadata": {"labels": {"room": "large"}}});
        clusters
            .patch("member2", &PatchParams::default(), &Patch::Merge(&label))
            .await?;
        let fds: Api<DynamicObject> =
            Api::namespaced_with(fed.host.clone(), NS, &web().api_resource());
        let selector =
            json!({"spec": {"placement": {"clusterSelector": {"matchLabels": {"room": "large"}}}}});
        fds.patch("web", &PatchParams::default(), &Patch::Merge(&selector))
            .await?;
        patch_rsp(&fed, json!({"intersectWithClusterSelector": true})).await?;
        page_shows_the_recorded_division(&browser, &fed, "member1 not selected", |d| {
            ensure!(
                field(d, "member1", "reason") == "NotSelected" && written(d) == 4,
                "member1 still selected"
            );
            Ok(())
        })
        .await?;

        let marker = browser
            .execute("return window.flotillaMarker || null;", vec![])
            .await?;
        ensure!(marker == "kept", "the page was reloaded (marker {marker})");
        browser.goto(&url).await?;
        overview_shows_each_members_summary(&browser, &fed).await
    }
    .await;
    browser.close().await;
    ctx.shutdown.cancel();
    steps
}
