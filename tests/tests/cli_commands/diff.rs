//! `flotilla diff` on real clusters: a manifest not applied yet (every placed cluster gains
//! the object), an unchanged propagated object (exit 0, only the summary), a changed
//! override (exactly that field, on that cluster only), a placement change (the cluster
//! losing the object is listed), and a ReplicaSchedulingPreference's replicas. One
//! federation serves every step; each step uses its own object.

use anyhow::{Context as _, ensure};
use flotilla_tests::{
    cli::Run, federation::Federation, member::config_maps, objects::FederatedObject,
};
use serde_json::{Value, json};

/// The namespace the scenario works in.
pub const NS: &str = "diff";

/// `flotilla diff ARGS` in-process against the host.
async fn diff(fed: &Federation, args: &[&str]) -> Run {
    let full: Vec<&str> = std::iter::once("diff")
        .chain(args.iter().copied())
        .collect();
    flotilla_tests::cli::run(fed, &full).await
}

/// Writes `objects` as a YAML manifest in the environment's directory; returns its path.
fn manifest(fed: &Federation, name: &str, objects: &[Value]) -> anyhow::Result<String> {
    let docs = objects
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    let path = fed
        .env
        .kubeconfig_path()
        .with_file_name(format!("{name}.yaml"));
    std::fs::write(&path, docs.join("---\n"))?;
    Ok(path.display().to_string())
}

/// The `-`/`+` lines of a diff, without the `---`/`+++` headers.
fn changed_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            (l.starts_with('-') && !l.starts_with("---"))
                || (l.starts_with('+') && !l.starts_with("+++"))
        })
        .collect()
}

fn settings(name: &str) -> FederatedObject {
    FederatedObject::config_map(NS, name, json!({"color": "blue", "size": "3"})).override_path(
        "member2",
        "/data/color",
        json!("green"),
    )
}

/// A manifest not applied yet: every placed cluster would gain it; nothing is written.
async fn a_new_object_is_created_in_every_placed_cluster(fed: &Federation) -> anyhow::Result<()> {
    let file = manifest(fed, "new", &[settings("new").to_json()])?;
    let run = diff(fed, &["-f", &file]).await;
    ensure!(run.code == 1, "exit {}: {}", run.code, run.out);
    for cluster in ["member1", "member2"] {
        let header = format!("--- /dev/null\n+++ {cluster}/configmap/{NS}/new\n");
        ensure!(
            run.out.contains(&header),
            "{header:?} missing:\n{}",
            run.out
        );
        ensure!(
            run.out.contains(&format!("{cluster}: would be created\n")),
            "{}",
            run.out
        );
    }
    ensure!(run.out.contains("+  color: blue\n") && run.out.contains("+  color: green\n"));
    ensure!(
        run.out.contains("+    kubefed.io/managed: 'true'\n")
            || run.out.contains("+    kubefed.io/managed: \"true\"\n"),
        "the managed label is part of what would be written:\n{}",
        run.out
    );
    ensure!(
        run.out
            .contains("2 cluster(s): 2 to create, 0 to update, 0 to delete, 0 unchanged"),
        "{}",
        run.out
    );
    for m in &fed.members {
        ensure!(
            config_maps(m, NS).get_opt("new").await?.is_none(),
            "the dry run wrote the object"
        );
    }
    Ok(())
}

/// Applied and propagated: nothing would change, only the summary is printed.
async fn an_unchanged_object_exits_zero_with_only_a_summary(
    fed: &Federation,
) -> anyhow::Result<()> {
    settings("same")
        .apply(&fed.host)
        .await?
        .wait_propagated()
        .await?;
    let run = diff(fed, &["federatedconfigmap/same", "-n", NS]).await;
    ensure!(run.code == 0, "exit {}: {}", run.code, run.out);
    ensure!(
        run.out
            == format!(
                "federatedconfigmap {NS}/same: 2 cluster(s): 0 to create, 0 to update, 0 to delete, 2 unchanged\n"
            ),
        "{}",
        run.out
    );
    // The same through a kubectl-style TYPE NAME and a short name.
    let run = diff(fed, &["fcm", "same", "-n", NS]).await;
    ensure!(run.code == 0, "exit {}: {}", run.code, run.out);
    Ok(())
}

/// A changed override: exactly that field, on that cluster only.
async fn a_changed_override_shows_only_that_field_on_that_cluster(
    fed: &Federation,
) -> anyhow::Result<()> {
    settings("tuned")
        .apply(&fed.host)
        .await?
        .wait_propagated()
        .await?;
    let changed = FederatedObject::config_map(NS, "tuned", json!({"color": "blue", "size": "3"}))
        .override_path("member2", "/data/color", json!("red"));
    let file = manifest(fed, "tuned", &[changed.to_json()])?;
    let run = diff(fed, &["-f", &file]).await;
    ensure!(run.code == 1, "exit {}: {}", run.code, run.out);
    ensure!(
        changed_lines(&run.out) == ["-  color: green", "+  color: red"],
        "{}",
        run.out
    );
    ensure!(
        run.out.contains(&format!(
            "--- member2/configmap/{NS}/tuned (live)\n+++ member2/configmap/{NS}/tuned (federated)\n"
        )),
        "{}",
        run.out
    );
    ensure!(
        !run.out.contains("member1/"),
        "member1 must not change:\n{}",
        run.out
    );
    ensure!(
        run.out.contains("member2: would be updated\n"),
        "{}",
        run.out
    );
    ensure!(
        run.out.contains("1 to update, 0 to delete, 1 unchanged"),
        "{}",
        run.out
    );
    Ok(())
}

/// A placement change: the cluster that would lose the object is listed.
async fn a_placement_change_lists_the_cluster_losing_the_object(
    fed: &Federation,
) -> anyhow::Result<()> {
    settings("moved")
        .apply(&fed.host)
        .await?
        .wait_propagated()
        .await?;
    let file = manifest(
        fed,
        "moved",
        &[settings("moved").on_clusters(&["member1"]).to_json()],
    )?;
    let run = diff(fed, &["-f", &file]).await;
    ensure!(run.code == 1, "exit {}: {}", run.code, run.out);
    ensure!(
        run.out
            .contains("member2: would be deleted (no longer placed)\n"),
        "{}",
        run.out
    );
    ensure!(
        run.out
            .ends_with("0 to create, 0 to update, 1 to delete, 1 unchanged\n"),
        "{}",
        run.out
    );
    ensure!(changed_lines(&run.out).is_empty(), "{}", run.out);
    Ok(())
}

/// A ReplicaSchedulingPreference in the manifest: its replicas are what each cluster gets,
/// and the member's defaults (from the dry run) are in the rendered object.
async fn an_rsp_in_the_manifest_sets_the_replicas_per_cluster(
    fed: &Federation,
) -> anyhow::Result<()> {
    let deploy = FederatedObject::deployment(NS, "web", 1, "nginx:1.25").on_clusters(&["member1"]);
    let rsp = json!({
        "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 5,
                 "clusters": {"member1": {"weight": 1, "minReplicas": 3}, "member2": {"weight": 1}}}
    });
    let file = manifest(fed, "web", &[deploy.to_json(), rsp])?;
    let run = diff(fed, &["-f", &file]).await;
    ensure!(run.code == 1, "exit {}: {}", run.code, run.out);
    let member2 = run
        .out
        .split("+++ member2/deployment/")
        .nth(1)
        .context("member2 gets the deployment")?;
    let member1 = run
        .out
        .split("+++ member1/deployment/")
        .nth(1)
        .context("member1 gets the deployment")?;
    ensure!(member1.contains("+  replicas: 4\n"), "{}", run.out);
    ensure!(member2.contains("+  replicas: 1\n"), "{}", run.out);
    ensure!(
        member1.contains("+  progressDeadlineSeconds: 600\n"),
        "the member's defaults are shown:\n{}",
        run.out
    );
    Ok(())
}

/// The scenario, in namespace [`NS`] of the shared federation.
pub async fn diff_shows_per_cluster_changes_and_exits_like_kubectl_diff(
    fed: &Federation,
) -> anyhow::Result<()> {
    a_new_object_is_created_in_every_placed_cluster(fed).await?;
    an_unchanged_object_exits_zero_with_only_a_summary(fed).await?;
    a_changed_override_shows_only_that_field_on_that_cluster(fed).await?;
    a_placement_change_lists_the_cluster_losing_the_object(fed).await?;
    an_rsp_in_the_manifest_sets_the_replicas_per_cluster(fed).await?;
    Ok(())
}
