//! `flotilla status`: a table of federated objects × member clusters with each cluster's
//! propagation state and the object's `Propagation` condition; with `--wait`, a gate for
//! scripts that succeeds once everything is propagated and fails fast on a failure that
//! retrying cannot fix.
//!
//! Reading the objects is thin I/O; what a status means ([`verdict`]) and how it is shown
//! ([`table`]) are pure.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{
    AggregateReason, ClusterReason, FederatedTypeConfig, core::PropagationMode,
    federated::FederatedStatus,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
};
use tokio_util::sync::CancellationToken;

use super::{
    Context, GlobalArgs, Output, access, parse_duration,
    progress::{Progress, propagated_line},
    resolve,
};

/// Examples of `flotilla status --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Every federated object in namespace demo, one row per member cluster
  flotilla status -n demo

  # One type, or one object, in every namespace
  flotilla status federatedconfigmaps -A
  flotilla status configmap/web-config -n demo

  # In a script: wait until propagated; exit non-zero on a failure or after 2 minutes
  flotilla status -n demo --wait --timeout 2m

  # Each member's nodes, CPU and memory requested of allocatable, and pods
  flotilla status --clusters

  # How each ReplicaSchedulingPreference divided its replicas, and why
  flotilla status rsp -n demo";

/// How often `--wait` looks again.
const POLL: Duration = Duration::from_secs(1);
/// Longest per-cluster message shown in the table (the full text is in `--wait` failures
/// and in the object's status).
const MESSAGE_WIDTH: usize = 72;

/// Arguments of `flotilla status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// `TYPE` or `TYPE/NAME`: a federated or target type in any spelling
    /// (`federatedconfigmaps`, `configmaps`, `FederatedConfigMap`, `cm`). Default: every
    /// enabled type.
    #[arg(value_name = "TYPE[/NAME]")]
    pub target: Option<String>,
    /// Name of the object (instead of `TYPE/NAME`).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Objects in every namespace (and cluster-scoped ones).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Wait until every listed object is propagated; exit non-zero when one fails for a
    /// reason retrying cannot fix, or on timeout.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Output format: the table (`wide` is the same table, as with kubectl), or the objects'
    /// kind, name, generation and status as `json` or `yaml` for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// List the member clusters with their resource summary (nodes, CPU and memory
    /// requested of allocatable, pods) instead of federated objects.
    #[arg(long)]
    pub clusters: bool,
}

/// How `flotilla status` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One row per object and cluster.
    #[default]
    Table,
    /// The same table (kubectl's `-o wide` habit).
    Wide,
    /// `{"items": [{kind, namespace, name, generation, status}]}`.
    Json,
    /// The same as YAML.
    Yaml,
}

/// The objects in `format`, with the summary line after a table.
pub fn render(objects: &[ObjectState], format: Format) -> anyhow::Result<String> {
    let doc = serde_json::json!({ "items": objects });
    Ok(match format {
        Format::Table | Format::Wide => format!(
            "{}\n{}\n{}{}",
            table(objects),
            summary(objects),
            super::decision::scheduling_lines(objects.iter().map(|o| (o.object(), &o.status))),
            super::drift::drift_lines(objects.iter().map(|o| (o.object(), &o.status)))
        ),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&doc)?),
        Format::Yaml => serde_saphyr::to_string(&doc)?,
    })
}

/// Which federated objects to show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// A type, in any spelling; `None` for every enabled type.
    pub type_name: Option<String>,
    /// One object's name.
    pub name: Option<String>,
    /// A namespace; `None` for all (cluster-scoped objects are shown with all namespaces or
    /// when their type is named).
    pub namespace: Option<String>,
}

/// One federated object as `status` sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectState {
    /// Federated kind (`FederatedConfigMap`).
    pub kind: String,
    /// Namespace, for namespaced types.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The object's status.
    pub status: FederatedStatus,
}

impl ObjectState {
    /// The object's state read from the host.
    pub fn from_dynamic(kind: &str, obj: &DynamicObject) -> Self {
        ObjectState {
            kind: kind.to_owned(),
            namespace: obj.metadata.namespace.clone(),
            name: obj.name_any(),
            generation: obj.metadata.generation.unwrap_or(0),
            status: FederatedStatus::from_dynamic(obj),
        }
    }

    /// `federatedconfigmap/web-config`.
    pub fn object(&self) -> String {
        format!("{}/{}", self.kind.to_lowercase(), self.name)
    }

    fn stale(&self) -> bool {
        self.status.observed_generation < self.generation || self.status.propagation().is_none()
    }
}

/// What an object's status means for `--wait`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `Propagation=True` for the current generation.
    Propagated,
    /// Not there yet (not reconciled, or failing for a reason that may clear); why.
    Pending(String),
    /// Failed for a reason retrying cannot fix; one line per failure.
    Failed(Vec<String>),
}

/// Judges one object's status.
pub fn verdict(o: &ObjectState) -> Verdict {
    if o.stale() {
        return Verdict::Pending(format!(
            "{}: generation {} not reconciled yet",
            o.object(),
            o.generation
        ));
    }
    let Some(cond) = o.status.propagation() else {
        return Verdict::Pending(format!("{}: no Propagation condition", o.object()));
    };
    if cond.status == "True" {
        return Verdict::Propagated;
    }
    let mut failures: Vec<String> = o
        .status
        .clusters
        .iter()
        .filter(|c| {
            c.status
                .parse::<ClusterReason>()
                .is_ok_and(ClusterReason::is_terminal)
        })
        .map(|c| {
            format!("{} in {}: {} {}", o.object(), c.name, c.status, c.message)
                .trim_end()
                .to_owned()
        })
        .collect();
    if cond.reason == AggregateReason::ComputePlacementFailed.as_str() {
        failures.push(
            format!("{}: {} {}", o.object(), cond.reason, cond.message)
                .trim_end()
                .to_owned(),
        );
    }
    if !failures.is_empty() {
        return Verdict::Failed(failures);
    }
    let mut why = vec![format!(
        "{}: Propagation {} {}",
        o.object(),
        cond.status,
        cond.reason
    )];
    for c in o.status.clusters.iter().filter(|c| !c.status.is_empty()) {
        why.push(format!("{}: {} {}", c.name, c.status, c.message));
    }
    Verdict::Pending(why.join("; ").trim_end().to_owned())
}

fn propagation_cell(o: &ObjectState) -> String {
    if o.stale() {
        return "Pending".into();
    }
    match o.status.propagation() {
        Some(c) if c.status == "True" => "True".into(),
        Some(c) if c.reason.is_empty() => c.status.clone(),
        Some(c) => format!("{} ({})", c.status, c.reason),
        None => "Pending".into(),
    }
}

/// A short reading of a collected member status (`statusCollection: Enabled`): the
/// replica counts of workloads, e.g. `2/3 ready`.
fn remote_summary(status: &serde_json::Value) -> Option<String> {
    let replicas = status.get("replicas")?.as_i64()?;
    let ready = status
        .get("readyReplicas")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    Some(format!("{ready}/{replicas} ready"))
}

/// The aggregated figure of a workload (`statusCollection: Enabled`): pods ready (Jobs:
/// completions) and clusters ready, e.g. `6/6 (2/2 clusters)`; `-` for other types.
fn ready_cell(o: &ObjectState) -> String {
    match &o.status.aggregated {
        Some(a) => match a.ready.as_ref().or(a.completions.as_ref()) {
            Some(pods) => format!("{pods} ({} clusters)", a.clusters),
            None => format!("({} clusters)", a.clusters),
        },
        None => "-".to_owned(),
    }
}

/// A propagated cluster's health under its type's rules when it is not plainly healthy
/// (`Failed: phase Failed`), from `status.aggregated.health`.
fn health_note(o: &ObjectState, cluster: &str) -> Option<String> {
    let cluster_ok = o
        .status
        .clusters
        .iter()
        .any(|c| c.name == cluster && c.status.is_empty());
    let h = o
        .status
        .aggregated
        .as_ref()?
        .health
        .iter()
        .find(|h| h.cluster == cluster)?;
    cluster_ok.then(|| format!("{}: {}", h.state, h.message))
}

fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let cut: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// The table: one row per object and cluster (`-` when no cluster is selected), with the
/// object's Propagation condition and each cluster's state (`OK`, or reason: message);
/// when a workload's status is aggregated, a READY column with its figure.
pub fn table(objects: &[ObjectState]) -> String {
    let namespaced = objects.iter().any(|o| o.namespace.is_some());
    let aggregated = objects.iter().any(|o| o.status.aggregated.is_some());
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["OBJECT", "PROPAGATION", "CLUSTER", "STATUS"];
    if aggregated {
        header.insert(1, "READY");
    }
    if namespaced {
        header.insert(0, "NAMESPACE");
    }
    rows.push(header.iter().map(|h| h.to_string()).collect());
    let mut sorted: Vec<&ObjectState> = objects.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    for o in sorted {
        let mut clusters: Vec<(String, String)> = o
            .status
            .clusters
            .iter()
            .map(|c| {
                let state = if let Some(note) = health_note(o, &c.name) {
                    shorten(&format!("OK, {note}"), MESSAGE_WIDTH)
                } else if c.status.is_empty() {
                    match c.remote_status.as_ref().and_then(remote_summary) {
                        Some(summary) => format!("OK ({summary})"),
                        None => "OK".to_owned(),
                    }
                } else if c.message.is_empty() {
                    c.status.clone()
                } else {
                    shorten(&format!("{}: {}", c.status, c.message), MESSAGE_WIDTH)
                };
                (c.name.clone(), state)
            })
            .collect();
        clusters.sort();
        if clusters.is_empty() {
            let state = match o.status.propagation() {
                Some(c) if !o.stale() && !c.message.is_empty() => {
                    shorten(&c.message, MESSAGE_WIDTH)
                }
                Some(_) if !o.stale() => "no cluster selected".to_owned(),
                _ => "-".to_owned(),
            };
            clusters.push(("-".into(), state));
        }
        for (cluster, state) in clusters {
            let mut row = vec![o.object(), propagation_cell(o), cluster, state];
            if aggregated {
                row.insert(1, ready_cell(o));
            }
            if namespaced {
                row.insert(0, o.namespace.clone().unwrap_or_else(|| "-".into()));
            }
            rows.push(row);
        }
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 3));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A one-line count of propagated, pending and failed objects.
pub fn summary(objects: &[ObjectState]) -> String {
    let (mut ok, mut pending, mut failed) = (0, 0, 0);
    for o in objects {
        match verdict(o) {
            Verdict::Propagated => ok += 1,
            Verdict::Pending(_) => pending += 1,
            Verdict::Failed(_) => failed += 1,
        }
    }
    format!(
        "{} object(s): {ok} propagated, {pending} pending, {failed} failed",
        objects.len()
    )
}

/// The federated objects of `selection`, and what was asked for but not found.
pub async fn snapshot(
    host: &Client,
    kubefed_ns: &str,
    selection: &Selection,
) -> anyhow::Result<(Vec<ObjectState>, Vec<String>)> {
    let ftcs: Vec<FederatedTypeConfig> = match &selection.type_name {
        Some(t) => vec![resolve::ftc_for(host, kubefed_ns, t).await?],
        None => resolve::list_ftcs(host, kubefed_ns)
            .await?
            .into_iter()
            .filter(|f| f.spec.propagation == PropagationMode::Enabled)
            .collect(),
    };
    let mut objects = Vec::new();
    let mut missing = Vec::new();
    for ftc in &ftcs {
        let mut found = false;
        // kubefed's alpha twin (types.kubefed.k8s.io) too: both are reconciled.
        for (fed, shown) in resolve::served_apis(ftc) {
            let ar = fed.to_kube();
            let api: Api<DynamicObject> = match (&selection.namespace, fed.namespaced()) {
                (Some(ns), true) => Api::namespaced_with(host.clone(), ns, &ar),
                (Some(_), false) if selection.type_name.is_none() => continue,
                _ => Api::all_with(host.clone(), &ar),
            };
            let listed = match &selection.name {
                Some(name) => api.get_opt(name).await.map(|o| o.into_iter().collect()),
                None => api.list(&ListParams::default()).await.map(|l| l.items),
            };
            match listed {
                Ok(items) => {
                    found |= !items.is_empty();
                    objects.extend(items.iter().map(|o| ObjectState::from_dynamic(&shown, o)));
                }
                // The type is configured but its CRD is not installed: nothing to show.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("reading {}", fed.plural_name)),
            }
        }
        if let (Some(name), false) = (&selection.name, found) {
            let kind = ftc.spec.federated_type.kind.to_lowercase();
            missing.push(format!("{kind}/{name}"));
        }
    }
    Ok((objects, missing))
}

/// Waits until every selected object is propagated. Fails, after printing the table and
/// the reasons, when one fails terminally, when `timeout` passes, or on `cancel`.
pub async fn wait(
    host: &Client,
    kubefed_ns: &str,
    selection: &Selection,
    timeout: Duration,
    cancel: &CancellationToken,
    out: &Output,
) -> anyhow::Result<Vec<ObjectState>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let progress = Progress::new(out);
    loop {
        let (objects, missing) = snapshot(host, kubefed_ns, selection).await?;
        let verdicts: Vec<Verdict> = objects.iter().map(verdict).collect();
        let done = verdicts
            .iter()
            .filter(|v| **v == Verdict::Propagated)
            .count();
        progress.show(&propagated_line(done, objects.len() + missing.len()));
        let failures: Vec<String> = verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Failed(f) => Some(f.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        if !failures.is_empty() {
            progress.clear();
            out.write(table(&objects));
            out.line("");
            for f in &failures {
                out.line(format!("FAILED {f}"));
            }
            anyhow::bail!(
                "{} propagation failure(s) that retrying cannot fix",
                failures.len()
            );
        }
        let pending: Vec<String> = verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Pending(p) => Some(p.clone()),
                _ => None,
            })
            .chain(missing.iter().map(|m| format!("{m}: not found")))
            .collect();
        if pending.is_empty() {
            progress.clear();
            return Ok(objects);
        }
        if tokio::time::Instant::now() >= deadline {
            progress.clear();
            out.write(table(&objects));
            out.line("");
            for p in &pending {
                out.line(format!("PENDING {p}"));
            }
            anyhow::bail!("not propagated within {timeout:?}");
        }
        tokio::select! {
            _ = cancel.cancelled() => {
                progress.clear();
                anyhow::bail!("interrupted while waiting for propagation")
            }
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Splits `TYPE/NAME` (a second positional NAME also works).
fn selection(
    global: &GlobalArgs,
    args: &StatusArgs,
    default_ns: String,
) -> anyhow::Result<Selection> {
    let (type_name, mut name) = match args.target.as_deref().map(|t| t.split_once('/')) {
        Some(Some((t, n))) => (Some(t.to_owned()), Some(n.to_owned())),
        Some(None) => (args.target.clone(), None),
        None => (None, None),
    };
    if let Some(n) = &args.name {
        anyhow::ensure!(
            name.is_none(),
            "give the name either as TYPE/NAME or as NAME, not both"
        );
        name = Some(n.clone());
    }
    anyhow::ensure!(
        !(args.all_namespaces && global.namespace.is_some()),
        "-A and -n exclude each other"
    );
    Ok(Selection {
        type_name,
        name,
        namespace: (!args.all_namespaces).then_some(default_ns),
    })
}

/// Runs `flotilla status`.
pub async fn run(global: &GlobalArgs, args: StatusArgs, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    if args.clusters {
        let t = super::status_capacity::clusters(&host, &global.kubefed_namespace).await?;
        ctx.out.write(t);
        return Ok(());
    }
    let sel = selection(global, &args, access::namespace(global, &access))?;
    if sel
        .type_name
        .as_deref()
        .is_some_and(super::status_capacity::is_rsp)
    {
        let table =
            super::status_capacity::rsps(&host, sel.namespace.as_deref(), sel.name.as_deref())
                .await?;
        ctx.out.write(table);
        return Ok(());
    }
    if args.wait {
        let objects = wait(
            &host,
            &global.kubefed_namespace,
            &sel,
            args.timeout,
            &ctx.shutdown,
            &ctx.out,
        )
        .await?;
        ctx.out.write(table(&objects));
        ctx.out
            .line(format!("\nall propagated: {}", summary(&objects)));
        return Ok(());
    }
    let (objects, missing) = snapshot(&host, &global.kubefed_namespace, &sel).await?;
    for m in &missing {
        ctx.out.line(format!("{m}: not found"));
    }
    if objects.is_empty() && matches!(args.output, Format::Table | Format::Wide) {
        if missing.is_empty() {
            ctx.out.line(match &sel.namespace {
                Some(ns) => format!("No federated objects in namespace {ns}."),
                None => "No federated objects.".to_owned(),
            });
        }
        return Ok(());
    }
    ctx.out.write(render(&objects, args.output)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federated::{ClusterStatus, FederatedCondition};

    #[test]
    fn collected_workload_status_shows_ready_replicas_per_cluster() {
        let mut o = object("web", ("True", ""), &[("member1", "", "")]);
        o.status.clusters[0].remote_status =
            Some(serde_json::json!({"replicas": 3, "readyReplicas": 2}));
        let t = table(&[o]);
        assert!(t.contains("OK (2/3 ready)"), "{t}");
        assert_eq!(
            remote_summary(&serde_json::json!({"phase": "Active"})),
            None
        );
    }

    #[test]
    fn an_aggregated_workload_shows_its_ready_pods_and_clusters() {
        let mut web = object("web", ("True", ""), &[("member1", "", "")]);
        web.status.aggregated = Some(flotilla_api::workload::AggregatedStatus {
            clusters: "1/2".into(),
            ready: Some("3/6".into()),
            ..Default::default()
        });
        let plain = object("config", ("True", ""), &[("member1", "", "")]);
        let t = table(&[web, plain]);
        let header = t.lines().next().unwrap_or_default();
        assert!(header.contains("READY"), "{t}");
        assert!(t.contains("3/6 (1/2 clusters)"), "{t}");
        let config_row = t.lines().find(|l| l.contains("config")).unwrap_or_default();
        assert!(config_row.contains(" - "), "{t}");
    }

    #[test]
    fn a_cluster_its_health_rules_call_failed_shows_the_rules_message() {
        let mut w = object(
            "widget",
            ("True", ""),
            &[("member1", "", ""), ("member2", "", "")],
        );
        w.status.aggregated = Some(flotilla_api::workload::AggregatedStatus {
            clusters: "1/2".into(),
            health: vec![flotilla_api::workload::ClusterHealth {
                cluster: "member2".into(),
                state: "Failed".into(),
                message: "phase Failed: disk full".into(),
            }],
            ..Default::default()
        });
        let t = table(&[w]);
        let row = |c: &str| {
            t.lines()
                .find(|l| l.contains(c))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            row("member2").contains("OK, Failed: phase Failed: disk full"),
            "{t}"
        );
        assert!(!row("member1").contains("Failed"), "{t}");
    }

    #[test]
    fn without_aggregated_workloads_the_table_has_no_ready_column() {
        let t = table(&[object("config", ("True", ""), &[("member1", "", "")])]);
        assert!(
            !t.lines().next().unwrap_or_default().contains("READY"),
            "{t}"
        );
    }

    fn object(name: &str, condition: (&str, &str), clusters: &[(&str, &str, &str)]) -> ObjectState {
        ObjectState {
            kind: "FederatedConfigMap".into(),
            namespace: Some("demo".into()),
            name: name.into(),
            generation: 2,
            status: FederatedStatus {
                observed_generation: 2,
                conditions: vec![FederatedCondition {
                    type_: "Propagation".into(),
                    status: condition.0.into(),
                    reason: condition.1.into(),
                    ..Default::default()
                }],
                clusters: clusters
                    .iter()
                    .map(|(n, s, m)| ClusterStatus {
                        name: (*n).into(),
                        status: (*s).into(),
                        message: (*m).into(),
                        remote_status: None,
                    })
                    .collect(),
                aggregated: None,
                placement: None,
                rollout: None,
                drift: Vec::new(),
                dependencies: Vec::new(),
            },
        }
    }

    #[test]
    fn a_propagated_object_of_the_current_generation_is_done() {
        let o = object(
            "web",
            ("True", ""),
            &[("member1", "", ""), ("member2", "", "")],
        );
        assert_eq!(verdict(&o), Verdict::Propagated);
    }

    #[test]
    fn a_status_of_an_older_generation_is_still_pending() {
        let mut o = object("web", ("True", ""), &[("member1", "", "")]);
        o.generation = 3;
        assert!(matches!(verdict(&o), Verdict::Pending(_)));
        assert!(table(&[o]).contains("Pending"));
    }

    #[test]
    fn a_bad_override_fails_at_once_naming_cluster_and_reason() {
        let o = object(
            "web",
            ("False", "CheckClusters"),
            &[
                ("member1", "", ""),
                ("member2", "ApplyOverridesFailed", "path /data/x not found"),
            ],
        );
        match verdict(&o) {
            Verdict::Failed(f) => {
                assert_eq!(f.len(), 1);
                assert!(f[0].contains("member2"), "{f:?}");
                assert!(f[0].contains("ApplyOverridesFailed"), "{f:?}");
                assert!(f[0].contains("/data/x"), "{f:?}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_recoverable_cluster_failure_keeps_waiting() {
        let o = object(
            "web",
            ("False", "CheckClusters"),
            &[("member1", "CreationFailed", "timeout")],
        );
        assert!(matches!(verdict(&o), Verdict::Pending(_)));
        let o = object(
            "web",
            ("False", "CheckClusters"),
            &[("member1", "ClusterNotReady", "")],
        );
        assert!(matches!(verdict(&o), Verdict::Pending(_)));
    }

    #[test]
    fn the_table_has_a_row_per_object_and_cluster_with_ok_or_the_reason() {
        let objects = vec![
            object(
                "bad",
                ("False", "CheckClusters"),
                &[
                    ("member2", "ApplyOverridesFailed", "path /data/x not found"),
                    ("member1", "", ""),
                ],
            ),
            object(
                "web",
                ("True", ""),
                &[("member1", "", ""), ("member2", "", "")],
            ),
        ];
        let text = table(&objects);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].starts_with("NAMESPACE"), "{text}");
        assert!(
            lines[1].contains("federatedconfigmap/bad")
                && lines[1].contains("member1")
                && lines[1].ends_with("OK"),
            "{text}"
        );
        assert!(
            lines[2].contains("False (CheckClusters)")
                && lines[2].contains("ApplyOverridesFailed: path /data/x not found"),
            "{text}"
        );
        assert!(
            lines[3].contains("federatedconfigmap/web") && lines[3].contains("True"),
            "{text}"
        );
        // Columns line up.
        let at = |l: &str| l.find("member").unwrap_or(0);
        assert_eq!(at(lines[1]), at(lines[4]), "{text}");
    }

    #[test]
    fn an_object_placed_nowhere_gets_one_row() {
        let o = object("none", ("True", ""), &[]);
        let text = table(&[o]);
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains("no cluster selected"), "{text}");
    }

    #[test]
    fn long_messages_are_shortened_in_the_table() {
        let long = "x".repeat(200);
        let o = object(
            "web",
            ("False", "CheckClusters"),
            &[("member1", "CreationFailed", &long)],
        );
        let text = table(&[o]);
        assert!(text.lines().all(|l| l.chars().count() < 160), "{text}");
        assert!(text.contains('…'));
    }

    #[test]
    fn json_and_yaml_output_carry_each_objects_status_for_scripts() {
        let o = object(
            "web",
            ("False", "CheckClusters"),
            &[("member2", "CreationFailed", "denied")],
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(std::slice::from_ref(&o), Format::Json).expect("renders"))
                .expect("JSON");
        assert_eq!(json["items"][0]["name"], "web");
        assert_eq!(
            json["items"][0]["status"]["clusters"][0]["status"],
            "CreationFailed"
        );
        let yaml = render(std::slice::from_ref(&o), Format::Yaml).expect("renders");
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML");
        assert_eq!(back, json);
        let wide = render(std::slice::from_ref(&o), Format::Wide).expect("renders");
        assert_eq!(wide, render(&[o], Format::Table).expect("renders"));
    }
}
