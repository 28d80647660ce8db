//! `flotilla diff`: what applying a federated object would do to each member cluster,
//! before it is applied — as `kubectl diff` does for one cluster.
//!
//! For every registered cluster: the object the controllers would write there
//! ([`desired`]: RSP scheduling, placement, overrides — the controllers' own functions),
//! run through the member's server-side apply as a dry run ([`member`]), against the live
//! object; shown as a unified diff ([`unified`]) of the noise-free YAML ([`render`]).
//! [`plan`] decides per cluster and the exit code. It writes nothing anywhere. Secret
//! values are redacted ([`flotilla_core::redact`]) unless `--show-secrets`.

pub mod input;
pub mod member;
pub mod plan;
pub mod unified;

use std::{collections::BTreeMap, path::PathBuf};

use flotilla_api::core::{EffectiveConfig, StatusCollectionMode};
use flotilla_core::drift::Policy;
use kube::Client;
use serde_json::Value;

use self::{
    input::Federated,
    member::MemberObject,
    plan::{Change, Live},
};
use super::{Context, Exit, GlobalArgs, access, resolve};
use flotilla_controllers::{
    multicluster::ClusterState,
    preview::{desired, render},
    sync::plan::{
        DesiredFor, DesiredSet, Observed,
        pipeline::{self, NamespacePlacement, PlacementFailure},
        retain_replicas,
    },
};

/// Examples of `flotilla diff --help`.
pub const EXAMPLES: &str = "\
Examples:
  # What would applying this manifest change in each member cluster?
  flotilla diff -f web.yaml

  # Is an applied federated object fully propagated as it asks?
  flotilla diff federateddeployment/web -n demo

  # A Secret's values read <redacted: N bytes>; to see them (a changed one is marked):
  flotilla diff federatedsecret/db -n demo --show-secrets

Exit status: 0 nothing would change, 1 something would, 2 an error (as kubectl diff).";

/// Arguments of `flotilla diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffArgs {
    /// A federated object in the host: `TYPE/NAME` or `TYPE NAME` (any spelling of an
    /// enabled type: `federateddeployment`, `fdeploy`, `deployments.apps`).
    #[arg(value_name = "TYPE[/NAME]", conflicts_with = "filename")]
    pub type_name: Option<String>,
    /// Name of the object when TYPE has none.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// A manifest of federated objects (need not be applied yet); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: Option<PathBuf>,
    /// Show Secret `data`/`stringData` values in clear (by default they read
    /// `<redacted: N bytes>`). For an operator at a terminal who may read them anyway.
    #[arg(long)]
    pub show_secrets: bool,
}

/// Runs `flotilla diff`: `Ok` when nothing would change, else [`Exit::Differences`], and
/// [`Exit::Failed`] (status 2) on any error.
pub async fn run(global: &GlobalArgs, args: DiffArgs, ctx: &Context) -> anyhow::Result<()> {
    let code = match diff(global, args, ctx).await {
        Ok(code) => code,
        Err(e) => return Err(Exit::Failed(format!("{e:#}")).into()),
    };
    match code {
        0 => Ok(()),
        1 => Err(Exit::Differences.into()),
        _ => Err(Exit::Failed("some clusters could not be compared (see above)".into()).into()),
    }
}

async fn diff(global: &GlobalArgs, args: DiffArgs, ctx: &Context) -> anyhow::Result<u8> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ns = access::namespace(global, &access);
    let kubefed_ns = &global.kubefed_namespace;
    let (docs, objects) = match (&args.filename, &args.type_name) {
        (Some(file), _) => {
            let text = input::read_manifest(file)?;
            let docs = input::parse_manifest(&text)?;
            let ftcs = resolve::list_ftcs(&host, kubefed_ns).await?;
            let objects = input::federated_in(&docs, &ftcs, &ns);
            anyhow::ensure!(
                !objects.is_empty(),
                "{} holds no object of an enabled federated type",
                file.display()
            );
            (docs, objects)
        }
        (None, Some(type_name)) => {
            let (type_name, name) = split_type_name(type_name, args.name.as_deref())?;
            let object = input::from_host(&host, kubefed_ns, type_name, &ns, name).await?;
            (Vec::new(), vec![object])
        }
        (None, None) => anyhow::bail!("give -f FILE or TYPE/NAME (see --help)"),
    };
    let clusters = member::clusters(&host, kubefed_ns).await?;
    let config = input::config(&host, kubefed_ns).await?;
    let mut code = 0;
    for fed in &objects {
        let (changes, failure, division) =
            object_changes(&host, &docs, fed, &clusters, &config).await?;
        ctx.out
            .write(report(fed, &changes, failure.as_ref(), args.show_secrets)?);
        if let Some(d) = division {
            ctx.out
                .write(super::status_capacity::division_lines(&fed.display(), &d));
        }
        // What the member's other writers changed, as the controller last saw it.
        ctx.out
            .write(super::drift::drift_lines([(fed.display(), &fed.status())]));
        code = code.max(plan::exit_code(changes.values()));
    }
    Ok(code)
}

/// `TYPE/NAME` or `TYPE NAME`.
pub fn split_type_name<'a>(
    type_name: &'a str,
    name: Option<&'a str>,
) -> anyhow::Result<(&'a str, &'a str)> {
    match (type_name.split_once('/'), name) {
        (Some((t, n)), None) if !t.is_empty() && !n.is_empty() => Ok((t, n)),
        (None, Some(n)) => Ok((type_name, n)),
        _ => anyhow::bail!("expected TYPE/NAME or TYPE NAME, got {type_name:?}"),
    }
}

/// What [`object_changes`] finds: the change per cluster, why the object could not be
/// placed as asked (if so), and its replicas per cluster with their reasons when a
/// ReplicaSchedulingPreference divides it.
type ObjectChanges = (
    BTreeMap<String, Change>,
    Option<PlacementFailure>,
    Option<Vec<flotilla_api::scheduling::ClusterDivision>>,
);

/// The change in every cluster the object is or would be in, and why the object could not
/// be placed as asked (the status reason the controller would report), if it could not.
async fn object_changes(
    host: &Client,
    docs: &[Value],
    fed: &Federated,
    clusters: &[ClusterState],
    config: &EffectiveConfig,
) -> anyhow::Result<ObjectChanges> {
    let spec = fed.spec()?;
    let status = fed.status();
    let target = &fed.ftc.spec.target_type;
    let is_namespace = target.group.is_empty() && target.kind == "Namespace";
    let namespace = fed.namespace();
    let needs_ns_placement = target.namespaced() && !is_namespace;
    let fns = match NamespacePlacement::applies(needs_ns_placement, &config.scope, namespace) {
        Some(ns) => input::namespace_spec(host, docs, ns).await?,
        None => None,
    };
    let ns_placement = NamespacePlacement::of(needs_ns_placement, &config.scope, namespace, fns);
    let rsp = match namespace {
        Some(ns) => input::rsp(host, docs, ns, fed.name()).await?,
        None => None,
    };
    let inputs = desired::Inputs {
        object: pipeline::Input {
            target,
            name: fed.name(),
            namespace,
            spec: &spec,
            previous: &status,
            clusters,
            namespace_placement: &ns_placement,
            collect_status: fed.ftc.spec.status_collection == Some(StatusCollectionMode::Enabled),
            default_unreachable_seconds: config.default_unreachable_toleration_seconds,
        },
        federated_kind: &fed.ftc.spec.federated_type.kind,
        rsp: rsp.as_ref().map(|(spec, _)| spec),
        rsp_status: rsp.as_ref().and_then(|(_, status)| status.as_ref()),
    };
    let planned = desired::desired(&inputs).map_err(anyhow::Error::msg)?;
    let division = desired::division(&inputs).map_err(anyhow::Error::msg)?;
    let set = planned.desired;
    let ar = target.to_kube();
    let where_ = MemberObject {
        api: &ar,
        namespace: if is_namespace {
            None
        } else {
            namespace.filter(|_| target.namespaced())
        },
        name: if is_namespace {
            namespace.unwrap_or_default()
        } else {
            fed.name()
        },
    };
    let keep = Keep {
        retain_replicas: spec.retain_replicas,
        drift: fed.drift_policy(),
    };
    let mut changes = BTreeMap::new();
    for cluster in clusters {
        let change = cluster_change(cluster, &set, &where_, &keep).await;
        if let Some(change) = change {
            changes.insert(cluster.name.clone(), change);
        }
    }
    Ok((changes, planned.failure, division))
}

/// What an update keeps of the member object: `spec.retainReplicas` and the fields of
/// `flotilla.io/drift-ignore`.
struct Keep {
    retain_replicas: bool,
    drift: Policy,
}

/// The change in one cluster; member failures become [`Change::Failed`].
async fn cluster_change(
    cluster: &ClusterState,
    set: &DesiredSet,
    where_: &MemberObject<'_>,
    keep: &Keep,
) -> Option<Change> {
    let desired = set.by_cluster.get(&cluster.name);
    let Some(client) = &cluster.client else {
        return desired
            .map(|_| Change::Failed("no client (check the KubeFedCluster and its Secret)".into()));
    };
    let live = match where_.live(client).await {
        Ok(live) => live,
        Err(e) => return Some(Change::Failed(format!("{e:#}"))),
    };
    let rendered = match desired {
        None => None,
        Some(DesiredFor::Failed(reason, message)) => Some(Err(format!("{reason}: {message}"))),
        Some(DesiredFor::Object { object, .. }) => {
            Some(render_in_member(client, where_, object, &live, keep).await)
        }
    };
    plan::decide(rendered, live)
}

/// The controller's object as the member would store it.
async fn render_in_member(
    client: &Client,
    where_: &MemberObject<'_>,
    object: &Value,
    live: &Live,
    keep: &Keep,
) -> Result<Value, String> {
    let object = match live {
        // The controller keeps the member's replicas and the fields its drift policy leaves
        // to other writers only when it updates an object.
        Live::Present { object: actual, .. } => {
            let object = if keep.retain_replicas {
                retain_replicas(object.clone(), &Observed::Present(actual.clone()))
            } else {
                object.clone()
            };
            keep.drift.keep_ignored(object, actual)
        }
        _ => object.clone(),
    };
    match where_.dry_run_apply(client, &object).await {
        Ok(Some(rendered)) => Ok(rendered),
        // The namespace is not in the member yet: it would be created first.
        Ok(None) => Ok(object),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// The diffs, one line per cluster that would change, the placement failure the controller
/// would report, and the summary. Secret values are redacted unless `show_secrets`.
fn report(
    fed: &Federated,
    changes: &BTreeMap<String, Change>,
    failure: Option<&PlacementFailure>,
    show_secrets: bool,
) -> anyhow::Result<String> {
    let mut out = String::new();
    if let Some((reason, message)) = failure {
        out.push_str(&format!(
            "{}: not placed as asked: {}: {message}\n",
            fed.display(),
            reason.as_str()
        ));
    }
    let target = &fed.ftc.spec.target_type;
    let path = |cluster: &str| {
        let object = match fed.namespace() {
            Some(ns) if target.namespaced() => format!("{ns}/{}", fed.name()),
            _ => fed.name().to_owned(),
        };
        format!("{cluster}/{}/{object}", target.kind.to_lowercase())
    };
    for (cluster, change) in changes {
        let text = match change {
            Change::Create { after } => {
                let (_, after) = render::shown(&Value::Null, after, show_secrets);
                unified::unified("", &render::yaml(&after)?, "/dev/null", &path(cluster))
            }
            Change::Update { before, after, .. } => {
                let (before, after) = render::shown(before, after, show_secrets);
                unified::unified(
                    &render::yaml(&before)?,
                    &render::yaml(&after)?,
                    &format!("{} (live)", path(cluster)),
                    &format!("{} (federated)", path(cluster)),
                )
            }
            _ => String::new(),
        };
        out.push_str(&text);
    }
    for (cluster, change) in changes {
        if *change != Change::Unchanged {
            out.push_str(&format!("{cluster}: {}\n", change.verdict()));
        }
    }
    out.push_str(&format!("{}: {}\n", fed.display(), plan::summary(changes)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_name_are_read_like_kubectl() {
        assert_eq!(
            split_type_name("fdeploy/web", None).expect("ok"),
            ("fdeploy", "web")
        );
        assert_eq!(
            split_type_name("fdeploy", Some("web")).expect("ok"),
            ("fdeploy", "web")
        );
        assert!(split_type_name("fdeploy", None).is_err());
        assert!(split_type_name("fdeploy/web", Some("x")).is_err());
    }
}
