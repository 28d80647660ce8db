//! `flotilla agent --check`: what an agent's two credentials may do, in one screen. Each side
//! is reached first (its version), then every permission the agent needs is asked with a
//! SelfSubjectAccessReview — in the host: the Works of its cluster's namespace (read, watch,
//! status), its Lease, Events; in the member: AppliedWorks and, for every kind its Works
//! carry today, create/patch/delete and the reads its caches make. [`verdicts`] and
//! [`render`] are pure; [`run`] asks the API servers.

use std::collections::BTreeSet;

use flotilla_api::work::{AGENT_LEASE, Work, cluster_namespace};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
    core::GroupVersionKind,
    discovery::{Scope, pinned_kind},
};

/// Which cluster a line is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The host (the agent's scoped credential).
    Host,
    /// The member the agent runs in.
    Member,
}

/// One permission the agent needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// The cluster.
    pub side: Side,
    /// The verb.
    pub verb: &'static str,
    /// API group.
    pub group: String,
    /// Plural resource, with `/subresource` when there is one.
    pub resource: String,
    /// Namespace (`None`: cluster-wide).
    pub namespace: Option<String>,
    /// Object name (`None`: any).
    pub name: Option<String>,
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// The side answered (its version).
    Reached(Side, String),
    /// The side could not be reached (why).
    Unreachable(Side, String),
    /// A permission, allowed or not (with the reviewer's reason when it gave one).
    Permission(Need, bool, String),
    /// Something the check could not find out.
    Unknown(Side, String),
}

impl Finding {
    /// Whether this finding means something is missing.
    pub fn is_problem(&self) -> bool {
        !matches!(self, Finding::Reached(..) | Finding::Permission(_, true, _))
    }
}

fn need(side: Side, verb: &'static str, group: &str, resource: &str, ns: Option<&str>) -> Need {
    Need {
        side,
        verb,
        group: group.to_owned(),
        resource: resource.to_owned(),
        namespace: ns.map(str::to_owned),
        name: None,
    }
}

const WORK_GROUP: &str = "multicluster.x-k8s.io";

/// What the agent of `cluster` needs in the host.
pub fn host_needs(cluster: &str) -> Vec<Need> {
    let ns = cluster_namespace(cluster);
    let ns = Some(ns.as_str());
    let mut needs: Vec<Need> = ["get", "list", "watch"]
        .into_iter()
        .map(|v| need(Side::Host, v, WORK_GROUP, "works", ns))
        .collect();
    needs.push(need(Side::Host, "patch", WORK_GROUP, "works/status", ns));
    for verb in ["get", "patch"] {
        let mut lease = need(Side::Host, verb, "coordination.k8s.io", "leases", ns);
        lease.name = Some(AGENT_LEASE.to_owned());
        needs.push(lease);
    }
    needs.push(need(Side::Host, "create", "events.k8s.io", "events", ns));
    // Multi-Cluster Services: the member's exports, reported (crate::mcs).
    for verb in ["list", "watch", "patch", "delete"] {
        let group = "multicluster.flotilla.io";
        needs.push(need(Side::Host, verb, group, "serviceexportreports", ns));
    }
    needs
}

/// A kind the member must let the agent manage: group, plural, and the namespaces its
/// objects live in (empty: cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Managed {
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Namespaces of its objects (`None`: cluster-scoped).
    pub namespace: Option<String>,
}

/// What the agent needs in the member for its records and the kinds it manages.
pub fn member_needs(kinds: &[Managed]) -> Vec<Need> {
    let mut needs: Vec<Need> = ["get", "list", "watch", "create", "patch", "delete"]
        .into_iter()
        .map(|v| need(Side::Member, v, WORK_GROUP, "appliedworks", None))
        .collect();
    needs.push(need(
        Side::Member,
        "patch",
        WORK_GROUP,
        "appliedworks/status",
        None,
    ));
    // Multi-Cluster Services: what the reporter (crate::mcs) reads and writes.
    for (verb, group, resource) in [
        ("list", WORK_GROUP, "serviceexports"),
        ("watch", WORK_GROUP, "serviceexports"),
        ("patch", WORK_GROUP, "serviceexports/status"),
        ("list", "", "services"),
        ("watch", "", "services"),
        ("list", "discovery.k8s.io", "endpointslices"),
        ("watch", "discovery.k8s.io", "endpointslices"),
    ] {
        needs.push(need(Side::Member, verb, group, resource, None));
    }
    for k in kinds {
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            // The caches watch a kind in every namespace.
            let ns = match verb {
                "list" | "watch" => None,
                _ => k.namespace.as_deref(),
            };
            needs.push(need(Side::Member, verb, &k.group, &k.resource, ns));
        }
    }
    needs
}

/// `verb resource.group in namespace ns` as RBAC names it.
pub fn describe(n: &Need) -> String {
    let resource = match n.group.as_str() {
        "" => n.resource.clone(),
        g => format!("{}.{g}", n.resource),
    };
    let named = n.name.as_ref().map(|x| format!(" {x}")).unwrap_or_default();
    match &n.namespace {
        Some(ns) => format!("{} {resource}{named} in namespace {ns}", n.verb),
        None => format!("{} {resource}{named} (all namespaces)", n.verb),
    }
}

/// The screen: one line per finding, problems marked, and a summary line.
pub fn render(findings: &[Finding]) -> String {
    let mut out = String::new();
    for side in [Side::Host, Side::Member] {
        out.push_str(match side {
            Side::Host => "HOST (the agent's host credential)\n",
            Side::Member => "MEMBER (the agent's own cluster)\n",
        });
        for f in findings.iter().filter(|f| side_of(f) == side) {
            let mark = if f.is_problem() { "MISSING" } else { "ok     " };
            let line = match f {
                Finding::Reached(_, version) => format!("reachable ({version})"),
                Finding::Unreachable(_, why) => format!("NOT reachable: {why}"),
                Finding::Permission(n, _, reason) if reason.is_empty() => describe(n),
                Finding::Permission(n, _, reason) => format!("{} ({reason})", describe(n)),
                Finding::Unknown(_, why) => format!("unknown: {why}"),
            };
            out.push_str(&format!("  {mark} {line}\n"));
        }
    }
    let problems = findings.iter().filter(|f| f.is_problem()).count();
    out.push_str(&match problems {
        0 => "everything the agent needs is allowed\n".to_owned(),
        n => format!("{n} problem(s): grant what is MISSING (see docs/pull-mode.md)\n"),
    });
    out
}

fn side_of(f: &Finding) -> Side {
    match f {
        Finding::Reached(s, _) | Finding::Unreachable(s, _) | Finding::Unknown(s, _) => *s,
        Finding::Permission(n, _, _) => n.side,
    }
}

/// Asks both sides; every finding, problems included (never an error: an unreachable side
/// is a finding).
pub async fn run(cluster: &str, host: &Client, member: &Client) -> Vec<Finding> {
    let mut findings = Vec::new();
    let host_up = reach(Side::Host, host, &mut findings).await;
    let member_up = reach(Side::Member, member, &mut findings).await;
    if host_up {
        for n in host_needs(cluster) {
            findings.push(review(host, n).await);
        }
    }
    if member_up {
        let kinds = if host_up {
            match managed_kinds(cluster, host, member).await {
                Ok(kinds) => kinds,
                Err(why) => {
                    findings.push(Finding::Unknown(Side::Member, why));
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        for n in member_needs(&kinds) {
            findings.push(review(member, n).await);
        }
    }
    findings
}

async fn reach(side: Side, client: &Client, findings: &mut Vec<Finding>) -> bool {
    match client.apiserver_version().await {
        Ok(v) => {
            findings.push(Finding::Reached(side, v.git_version));
            true
        }
        Err(e) => {
            findings.push(Finding::Unreachable(side, e.to_string()));
            false
        }
    }
}

async fn review(client: &Client, n: Need) -> Finding {
    let (resource, subresource) = match n.resource.split_once('/') {
        Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
        None => (n.resource.clone(), None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(n.verb.to_owned()),
                group: Some(n.group.clone()),
                resource: Some(resource),
                subresource,
                namespace: n.namespace.clone(),
                name: n.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => {
            let status = answer.status.unwrap_or_default();
            let reason = status.reason.unwrap_or_default();
            Finding::Permission(n, status.allowed, reason)
        }
        Err(e) => Finding::Unknown(n.side, format!("{}: {e}", describe(&n))),
    }
}

/// The kinds the cluster's Works carry today, resolved through the member's discovery.
async fn managed_kinds(
    cluster: &str,
    host: &Client,
    member: &Client,
) -> Result<Vec<Managed>, String> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(cluster));
    let list = works
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the Works: {e}"))?;
    let mut kinds = BTreeSet::new();
    for w in &list.items {
        for m in &w.spec.workload.manifests {
            let api_version = m["apiVersion"].as_str().unwrap_or_default();
            let kind = m["kind"].as_str().unwrap_or_default();
            let ns = m["metadata"]["namespace"].as_str().unwrap_or_default();
            kinds.insert((api_version.to_owned(), kind.to_owned(), ns.to_owned()));
        }
    }
    let mut managed = BTreeSet::new();
    for (api_version, kind, ns) in kinds {
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (ar, caps) = pinned_kind(member, &gvk)
            .await
            .map_err(|e| format!("the member does not serve {kind} {api_version}: {e}"))?;
        managed.insert(Managed {
            group: ar.group,
            resource: ar.plural,
            namespace: (caps.scope == Scope::Namespaced).then_some(ns),
        });
    }
    Ok(managed.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_needs_only_its_own_namespace() {
        let needs = host_needs("c1");
        assert!(
            needs
                .iter()
                .all(|n| n.namespace.as_deref() == Some("flotilla-cluster-c1"))
        );
        let described: Vec<_> = needs.iter().map(describe).collect();
        assert!(described.contains(
            &"patch works/status.multicluster.x-k8s.io in namespace flotilla-cluster-c1".into()
        ));
        assert!(
            described.contains(
                &"patch leases.coordination.k8s.io flotilla-agent in namespace flotilla-cluster-c1"
                    .into()
            )
        );
    }

    #[test]
    fn every_managed_kind_is_checked_for_writes_and_cluster_wide_reads() {
        let needs = member_needs(&[Managed {
            group: String::new(),
            resource: "secrets".into(),
            namespace: Some("demo".into()),
        }]);
        let d: Vec<_> = needs.iter().map(describe).collect();
        assert!(
            d.contains(&"create secrets in namespace demo".into()),
            "{d:?}"
        );
        assert!(
            d.contains(&"watch secrets (all namespaces)".into()),
            "{d:?}"
        );
        assert!(d.contains(&"delete appliedworks.multicluster.x-k8s.io (all namespaces)".into()));
    }

    #[test]
    fn the_screen_marks_what_is_missing_and_counts_it() {
        let ok = Finding::Reached(Side::Host, "v1.20.2".into());
        let missing = Finding::Permission(
            need(Side::Member, "create", "", "secrets", Some("demo")),
            false,
            String::new(),
        );
        let screen = render(&[ok.clone(), missing.clone()]);
        assert!(screen.contains("ok      reachable (v1.20.2)"), "{screen}");
        assert!(
            screen.contains("MISSING create secrets in namespace demo"),
            "{screen}"
        );
        assert!(screen.ends_with("1 problem(s): grant what is MISSING (see docs/pull-mode.md)\n"));
        assert!(render(&[ok]).ends_with("everything the agent needs is allowed\n"));
        assert!(Finding::Unreachable(Side::Member, "refused".into()).is_problem());
    }
}
