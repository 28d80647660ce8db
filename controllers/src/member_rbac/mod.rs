//! Least-privilege member credentials: each joined member's ClusterRole (named in the
//! KubeFedCluster's `flotilla.io/member-cluster-role` annotation by `flotilla join`) grants
//! exactly the target types of the enabled FederatedTypeConfigs ([`rules`]), and this
//! controller keeps it in step when a type is enabled or disabled — on every joined member,
//! including those joined before the change; and grants token requests for exactly the
//! ServiceAccounts that ServiceAccountImports name in each member. It reads the role first
//! and writes only when the rules differ, so a restart writes nothing when nothing changed.

pub mod rules;
pub mod scope;

pub use scope::Scope;

use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::{Action, PassRunner, Wake},
    tasks::AbortOnDrop,
};
use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use flotilla_api::{FIELD_MANAGER, FederatedTypeConfig, KubeFedCluster, MEMBER_ROLE_ANNOTATION};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        events::{EventType, Recorder},
        reflector::Store,
    },
};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::{
    multicluster::ClusterSet,
    watch::{FailureLog, WatchParams, notifying_store, notifying_store_with},
};
use flotilla_api::admiralty::{AnyImport, ImportGroup};

/// How often every member's role is checked again even without a change (a role edited
/// in the member by hand is put back).
const RECHECK: Duration = Duration::from_secs(300);

/// Keeps every joined member's ClusterRole in step with the enabled types, one pass over
/// every member `scope` covers on the library's pass runner. Runs until aborted.
pub async fn run(host: Client, namespace: String, clusters: ClusterSet, scope: Scope) {
    let changed = Arc::new(Notify::new());
    let (ftcs, ftc_watch) = notifying_store::<FederatedTypeConfig>(
        Api::namespaced(host.clone(), &namespace),
        WatchParams::host("federated type config"),
        &changed,
    );
    let (kfcs, kfc_watch) = notifying_store::<KubeFedCluster>(
        Api::namespaced(host.clone(), &namespace),
        WatchParams::host("kubefed cluster"),
        &changed,
    );
    // Imports are not gated on: Admiralty's CRD is optional, and its store may never fill.
    let (imports, import_watches) = import_stores(&host, &changed);
    let (gate, gate_task) = {
        let (ftcs, kfcs) = (ftcs.clone(), kfcs.clone());
        Gate::after(async move { store_ready(&ftcs).await && store_ready(&kfcs).await })
    };
    let [flotilla_imports, admiralty_imports] = import_watches;
    let _abort = AbortOnDrop::from([
        ftc_watch,
        kfc_watch,
        gate_task,
        flotilla_imports,
        admiralty_imports,
    ]);
    let recorder = crate::events::recorder(host.clone(), "flotilla-member-rbac");
    // The first pass waits for the stores' first lists, which wake it.
    let mut runner = PassRunner::new("member-rbac", changed)
        .period(RECHECK)
        .gate(gate)
        .wake_on_changes(clusters.changes());
    let mut applied: HashMap<String, Vec<PolicyRule>> = HashMap::new();
    while let Some(wake) = runner.next().await {
        if wake == Wake::Timer {
            applied.clear();
        }
        let members = Members {
            clusters: &clusters,
            scope,
            imports: &imports,
        };
        reconcile_all(&host, &recorder, &ftcs, &kfcs, members, &mut applied).await;
        // Failures are said as Events and retried on the next change or recheck, as
        // before the pass runner.
        runner.finish(Action::AwaitChange);
    }
}

/// The members a pass covers: the Push ones with a client in `clusters`, as `scope` says,
/// and the ServiceAccountImports naming them.
#[derive(Clone, Copy)]
struct Members<'a> {
    clusters: &'a ClusterSet,
    scope: Scope,
    imports: &'a [Store<AnyImport>; 2],
}

/// Stores of both groups' ServiceAccountImports, each change waking a pass.
fn import_stores(
    host: &Client,
    changed: &Arc<Notify>,
) -> ([Store<AnyImport>; 2], [tokio::task::JoinHandle<()>; 2]) {
    let store = |group: ImportGroup| {
        let ar = group.api_resource();
        let mut params = WatchParams::host("ServiceAccountImport");
        // Admiralty's CRD is optional: until it is installed, its watch fails quietly.
        if group == ImportGroup::Admiralty {
            params.failures = FailureLog::Debug;
        }
        notifying_store_with(
            Api::<AnyImport>::all_with(host.clone(), &ar),
            ar,
            params,
            changed,
        )
    };
    let (a, a_task) = store(ImportGroup::Flotilla);
    let (b, b_task) = store(ImportGroup::Admiralty);
    ([a, b], [a_task, b_task])
}

/// Names of the member ServiceAccounts the imports name in `cluster`.
fn imported_accounts(imports: &[Store<AnyImport>; 2], cluster: &str) -> BTreeSet<String> {
    imports
        .iter()
        .flat_map(|s| s.state())
        .filter(|i| i.spec.cluster_name == cluster)
        .map(|i| i.spec.name.clone())
        .collect()
}

async fn reconcile_all(
    host: &Client,
    recorder: &Recorder,
    ftcs: &Store<FederatedTypeConfig>,
    kfcs: &Store<KubeFedCluster>,
    members: Members<'_>,
    applied: &mut HashMap<String, Vec<PolicyRule>>,
) {
    let Members {
        clusters,
        scope,
        imports,
    } = members;
    let types = rules::enabled_types(ftcs.state().iter().map(|f| &**f));
    for kfc in kfcs.state() {
        let name = kfc.name_any();
        if !scope.covers(kfc.spec.is_pull()) {
            continue;
        }
        // A Pull cluster's agent sets its own role from what the host publishes.
        if kfc.spec.is_pull() {
            crate::pull_rbac::reconcile(host, &name, &types, applied).await;
            continue;
        }
        // Clusters joined without the annotation (kubefedctl) keep the role they were given.
        let Some(role) = kfc.annotations().get(MEMBER_ROLE_ANNOTATION) else {
            continue;
        };
        let Some(client) = clusters
            .get(&name)
            .filter(|c| c.ready)
            .and_then(|c| c.client)
        else {
            continue;
        };
        let rules = rules::member_rules(&types, role, &imported_accounts(imports, &name));
        if applied.get(&name) == Some(&rules) {
            continue;
        }
        match ensure_role(&client, role, &rules).await {
            Ok(()) => {
                applied.insert(name, rules);
            }
            Err(e) => {
                warn!(cluster = %name, %role, error = %e, "updating the member cluster role failed");
                // Said once per attempt that found work to do: attempts follow changes of
                // the type configs, the registry and cluster health, not a timer loop.
                let note = format!(
                    "updating the member ClusterRole {role} to the enabled types failed: {e}; types enabled since may be forbidden in this cluster (join it again with `flotilla join`)"
                );
                let reference = kfc.object_ref(&());
                crate::events::publish(
                    recorder,
                    &reference,
                    EventType::Warning,
                    "MemberRoleUpdateFailed",
                    "ScopeCredential",
                    note,
                )
                .await;
            }
        }
    }
}

/// Reads the role and applies `rules` only when they differ.
async fn ensure_role(client: &Client, role: &str, rules: &[PolicyRule]) -> Result<(), kube::Error> {
    let api: Api<ClusterRole> = Api::all(client.clone());
    let current = api.get_opt(role).await?;
    if current.as_ref().and_then(|r| r.rules.as_deref()) == Some(rules) {
        debug!(%role, "member cluster role up to date");
        return Ok(());
    }
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role},
        "rules": rules,
    });
    api.patch(
        role,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    info!(%role, rules = rules.len(), "member cluster role updated to the enabled types");
    Ok(())
}
