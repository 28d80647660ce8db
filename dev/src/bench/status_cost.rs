//! `flotilla bench --scenario status-cost`: what one status write of a federated object
//! costs the host API server, and what changes that cost — the patch type, how much the
//! patch carries, how large the object is, how many watchers receive the change.
//!
//! No control plane runs: the benchmark creates federated objects in the host and writes
//! each one's status once, the way the sync controller does, so the host apiserver's and
//! etcd's own CPU time (from `/proc`) is the whole cost. Each variant gets fresh objects, so
//! every variant starts from the same state; creates are measured too, as the yardstick.

use std::{collections::BTreeMap, fmt::Write as _, time::Instant};

use anyhow::Context as _;
use flotilla_localenv::{EnvOptions, LocalEnv};
use futures::{StreamExt, TryStreamExt, stream};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
    core::DynamicObject,
    runtime::{WatchStreamExt, watcher},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::{
    BenchOptions, MANAGER,
    procfs::{clusters_cpu, process_group},
    warmup::ensure_namespace,
    workload::Kind,
};
use crate::bootstrap::Bootstrap;

/// How a variant writes the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Write {
    /// A JSON merge patch of the whole status, as the sync controller sends it.
    MergeFull,
    /// A JSON merge patch of one field (the smallest status change).
    MergeOneField,
    /// Server-side apply of the whole status.
    Apply,
}

/// One way of writing a status, measured on its own fresh objects.
#[derive(Debug, Clone, Copy)]
struct Variant {
    name: &'static str,
    write: Write,
    /// Bytes of data in each object's template (the object's size).
    template_bytes: usize,
    /// Clusters listed in the status.
    clusters: usize,
    /// Watchers of the namespace (a controller's own counts as one); each receives every
    /// change.
    watchers: usize,
}

const BASE: Variant = Variant {
    name: "merge patch, whole status (what the controller sends), 2 clusters",
    write: Write::MergeFull,
    template_bytes: 100,
    clusters: 2,
    watchers: 1,
};

const VARIANTS: [Variant; 6] = [
    BASE,
    Variant {
        name: "merge patch of one field",
        write: Write::MergeOneField,
        ..BASE
    },
    Variant {
        name: "server-side apply, whole status",
        write: Write::Apply,
        ..BASE
    },
    Variant {
        name: "whole status, 10 clusters",
        clusters: 10,
        ..BASE
    },
    Variant {
        name: "whole status, 16 KiB template",
        template_bytes: 16 * 1024,
        ..BASE
    },
    Variant {
        name: "whole status, 5 watchers",
        watchers: 5,
        ..BASE
    },
];

/// One variant's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusCostRow {
    /// What was written.
    pub variant: String,
    /// Host apiserver CPU per create of these objects, milliseconds.
    pub create_apiserver_ms: f64,
    /// Host apiserver CPU per status write, milliseconds.
    pub status_apiserver_ms: f64,
    /// etcd CPU per status write, milliseconds.
    pub status_etcd_ms: f64,
    /// Bytes of the status patch sent.
    pub patch_bytes: usize,
    /// Status writes per second at the benchmark's concurrency.
    pub writes_per_second: f64,
}

/// The status-cost report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusCostReport {
    /// Objects (and status writes) per variant and round (figures are medians of
    /// [`ROUNDS`] rounds).
    pub writes: usize,
    /// Concurrent writes.
    pub concurrency: usize,
    /// One row per variant, the controller's own write first.
    pub rows: Vec<StatusCostRow>,
}

/// Runs the measurement on a fresh local host (one member, unused, so the federation's
/// CRDs and types are exactly the benchmark's).
pub async fn run(opts: &BenchOptions) -> anyhow::Result<StatusCostReport> {
    let writes = opts.objects.unwrap_or(1000).max(1);
    let env = LocalEnv::start(EnvOptions::with_members(1))
        .await
        .context("starting the local clusters")?;
    let result = measure(&env, writes, opts.concurrency).await;
    if let Err(e) = env.shutdown().await {
        warn!(error = %e, "stopping the local clusters failed");
    }
    let rows = result?;
    let report = StatusCostReport {
        writes,
        concurrency: opts.concurrency,
        rows,
    };
    super::write_json(opts.json.as_deref(), &report)?;
    Ok(report)
}

/// Rounds of every variant, interleaved; each figure is the median over the rounds, so a
/// burst of other work on the machine moves one round, not the result.
const ROUNDS: usize = 3;

async fn measure(
    env: &LocalEnv,
    writes: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<StatusCostRow>> {
    let fed = Bootstrap::new(MANAGER).federate(env, |_| {}).await?;
    let procs: Vec<(u32, String)> = env
        .pids()
        .into_iter()
        .map(|p| (p, process_group(p)))
        .filter(|(_, g)| g == "apiserver (host)" || g == "etcd")
        .collect();
    let mut rounds: Vec<Vec<StatusCostRow>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..ROUNDS {
        for (i, v) in VARIANTS.iter().enumerate() {
            info!(round, variant = v.name, "measuring a status write");
            let ns = format!("status-cost-{round}-{i}");
            ensure_namespace(&fed.host, &ns).await?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(fed.host.clone(), &ns, &Kind::ConfigMap.federated());
            rounds[i].push(measure_variant(&api, &procs, v, writes, concurrency).await?);
        }
    }
    Ok(rounds.into_iter().map(median_row).collect())
}

async fn measure_variant(
    api: &Api<DynamicObject>,
    procs: &[(u32, String)],
    v: &Variant,
    writes: usize,
    concurrency: usize,
) -> anyhow::Result<StatusCostRow> {
    let watchers: Vec<_> = (0..v.watchers).map(|_| drain_watch(api.clone())).collect();
    let names: Vec<String> = (0..writes).map(|n| format!("s{n:05}")).collect();
    let before = clusters_cpu(procs);
    each(&names, concurrency, |n| create(api, n, v.template_bytes)).await?;
    let created = clusters_cpu(procs);
    let started = Instant::now();
    each(&names, concurrency, |n| write_status(api, n, v)).await?;
    let seconds = started.elapsed().as_secs_f64();
    let after = clusters_cpu(procs);
    for w in watchers {
        w.abort();
    }
    let per = |a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, group: &str| {
        let cpu = a.get(group).copied().unwrap_or(0.0) - b.get(group).copied().unwrap_or(0.0);
        1000.0 * cpu / writes as f64
    };
    Ok(StatusCostRow {
        variant: v.name.into(),
        create_apiserver_ms: per(&created, &before, "apiserver (host)"),
        status_apiserver_ms: per(&after, &created, "apiserver (host)"),
        status_etcd_ms: per(&after, &created, "etcd"),
        patch_bytes: status_patch(v).to_string().len(),
        writes_per_second: writes as f64 / seconds.max(f64::EPSILON),
    })
}

/// Each figure's median over a variant's rounds.
fn median_row(rows: Vec<StatusCostRow>) -> StatusCostRow {
    let median = |f: fn(&StatusCostRow) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    StatusCostRow {
        create_apiserver_ms: median(|r| r.create_apiserver_ms),
        status_apiserver_ms: median(|r| r.status_apiserver_ms),
        status_etcd_ms: median(|r| r.status_etcd_ms),
        writes_per_second: median(|r| r.writes_per_second),
        ..rows.first().cloned().unwrap_or_default()
    }
}

/// A watcher of the namespace whose events are read and dropped, as a controller's would be.
fn drain_watch(api: Api<DynamicObject>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default()).default_backoff();
        events.for_each(|_| async {}).await;
    })
}

async fn each<F, Fut>(names: &[String], concurrency: usize, op: F) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    stream::iter(names.iter().cloned())
        .map(op)
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
        .context("a status-cost write failed")
}

async fn create(api: &Api<DynamicObject>, name: String, bytes: usize) -> Result<(), kube::Error> {
    let ar = Kind::ConfigMap.federated();
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": {"name": name},
        "spec": {
            "template": {"data": {"payload": "x".repeat(bytes)}},
            "placement": {"clusterSelector": {}},
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &obj).await.map(|_| ())
}

async fn write_status(
    api: &Api<DynamicObject>,
    name: String,
    v: &Variant,
) -> Result<(), kube::Error> {
    let body = status_patch(v);
    let pp = PatchParams::default();
    let result = match v.write {
        Write::MergeFull | Write::MergeOneField => {
            api.patch_status(&name, &pp, &Patch::Merge(&body)).await
        }
        Write::Apply => {
            let ar = Kind::ConfigMap.federated();
            let mut body = body;
            body["apiVersion"] = json!(ar.api_version);
            body["kind"] = json!(ar.kind);
            let pp = PatchParams::apply(MANAGER).force();
            api.patch_status(&name, &pp, &Patch::Apply(&body)).await
        }
    };
    result.map(|_| ())
}

/// The status a variant writes: what the sync controller writes for a propagated object.
fn status_patch(v: &Variant) -> Value {
    if v.write == Write::MergeOneField {
        return json!({"status": {"observedGeneration": 1}});
    }
    let clusters: Vec<Value> = (1..=v.clusters)
        .map(|i| json!({"name": format!("member{i}")}))
        .collect();
    json!({"status": {
        "observedGeneration": 1,
        "clusters": clusters,
        "conditions": [{
            "type": "Propagation",
            "status": "True",
            "lastTransitionTime": "2026-11-22T00:00:00Z",
            "lastUpdateTime": "2026-11-22T00:00:00Z",
        }],
    }})
}

impl StatusCostReport {
    /// The report as a table for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "status-cost: {} federated objects per variant, {} concurrent writes, host apiserver and etcd CPU per request (medians of {ROUNDS} interleaved rounds)",
            self.writes, self.concurrency
        );
        let _ = writeln!(
            s,
            "{:<66} {:>9} {:>12} {:>9} {:>7} {:>9}",
            "variant", "create ms", "status ms", "etcd ms", "bytes", "writes/s"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<66} {:>9.2} {:>12.2} {:>9.2} {:>7} {:>9.0}",
                r.variant,
                r.create_apiserver_ms,
                r.status_apiserver_ms,
                r.status_etcd_ms,
                r.patch_bytes,
                r.writes_per_second
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_changes_one_thing_from_the_controllers_own_write() {
        for v in &VARIANTS[1..] {
            let differences = [
                v.write != BASE.write,
                v.template_bytes != BASE.template_bytes,
                v.clusters != BASE.clusters,
                v.watchers != BASE.watchers,
            ];
            assert_eq!(differences.iter().filter(|d| **d).count(), 1, "{}", v.name);
        }
    }

    #[test]
    fn a_variants_figures_are_medians_of_its_rounds() {
        let row = |ms: f64| StatusCostRow {
            variant: "v".into(),
            status_apiserver_ms: ms,
            patch_bytes: 7,
            ..StatusCostRow::default()
        };
        let m = median_row(vec![row(9.0), row(1.0), row(2.0)]);
        assert_eq!((m.status_apiserver_ms, m.patch_bytes), (2.0, 7));
        assert_eq!(m.variant, "v");
    }

    #[test]
    fn the_status_lists_the_variants_clusters_and_the_small_patch_one_field() {
        let ten = status_patch(&VARIANTS[3]);
        assert_eq!(ten["status"]["clusters"].as_array().map(Vec::len), Some(10));
        let small = status_patch(&VARIANTS[1]);
        assert_eq!(small, json!({"status": {"observedGeneration": 1}}));
        let table = StatusCostReport {
            writes: 1,
            concurrency: 1,
            rows: vec![StatusCostRow {
                variant: BASE.name.into(),
                ..StatusCostRow::default()
            }],
        }
        .table();
        assert!(table.contains(BASE.name), "{table}");
    }
}
