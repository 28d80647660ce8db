//! The CLI's federation commands on one federation of two members: `flotilla diff`
//! (`cli_commands/diff.rs`) and the kubefedctl-style invocations
//! (`cli_commands/kubefedctl.rs`), each a scenario in its own namespace, run at once.

mod diff;
mod kubefedctl;

use flotilla_tests::{federation::federation, scenario, scenarios::run_all};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn diff_and_kubefedctl_style_commands_on_one_federation() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let fed = federation(2).await?;
    let fed = &fed;
    run_all(
        fed,
        vec![
            scenario!(fed, diff::NS => diff::diff_shows_per_cluster_changes_and_exits_like_kubectl_diff),
            scenario!(fed, kubefedctl::NS => kubefedctl::kubefedctl_style_invocations_work_on_real_clusters),
        ],
    )
    .await;
    Ok(())
}
