//! Strays: managed member objects whose federated object no longer exists (it was deleted
//! while Flotilla was not running, or its finalizer was removed by hand). Each is checked
//! live and deleted — or only unlabelled, for namespaces that must never be deleted and
//! for objects an orphaning deletion had to leave behind ([`super::orphans`]).

use futures::future::join_all;
use kube::core::DynamicObject;
use tracing::{info, warn};

use super::{
    Key, SyncShared,
    action::{Action, Error},
    dispatch::{MemberOp, MemberRef, run_on_member},
    host::host_namespace_uid,
    observe,
    orphans::{StrayOp, stray_op},
    plan::Outcome,
    pull::Works,
    type_info::TypeInfo,
};
use crate::multicluster::MemberWatch;

/// No federated object for the key: clean up any managed member object of that name
/// (`members`: the member caches that say which clusters hold one; `works`: the Pull
/// clusters' Works).
pub(super) async fn clean(
    shared: &SyncShared,
    ty: &TypeInfo,
    members: &MemberWatch<DynamicObject>,
    works: Works<'_>,
    key: &Key,
) -> Result<Action, Error> {
    let (m_ns, m_name) = ty.member_name(key);
    let clusters: Vec<_> = (shared.clusters.ready().into_iter())
        .filter(|c| observe::holds_managed(members, ty, &c.name, key))
        .collect();
    let keep = ty.is_protected(key, &shared.namespace);
    let works_ok = works.clean_strays(key, keep).await;
    if clusters.is_empty() {
        return Ok(if works_ok {
            Action::AwaitChange
        } else {
            Action::Backoff { recheck: None }
        });
    }
    let host_ns_uid = host_namespace_uid(&shared.host, ty, key).await?;
    let kind = &ty.fed_ar.kind;
    let jobs = clusters.into_iter().map(|c| {
        let host_uid = host_ns_uid.clone();
        let orphaned = shared.orphans.is_orphaned(kind, key, &c.name);
        let keep = stray_op(keep, orphaned) == StrayOp::Unlabel;
        async move {
            let target = MemberRef {
                cluster: c.name.clone(),
                api: ty.member_api(c.client.clone(), m_ns),
                name: m_name.to_owned(),
            };
            let op = MemberOp::CleanStray { keep, host_uid };
            let outcome = run_on_member(shared, target, op).await;
            if let Outcome::Status(reason, msg) = &outcome {
                warn!(cluster = %c.name, object = ?key, %reason, msg, "cleaning up a stray member object failed");
                return false;
            }
            if orphaned {
                info!(cluster = %c.name, object = ?key, "kept the member object an orphaning deletion left behind; unlabelled it");
                shared.orphans.kept(kind, key, &c.name);
            }
            true
        }
    });
    let ok = join_all(jobs).await.into_iter().all(|ok| ok) && works_ok;
    Ok(if ok {
        Action::AwaitChange
    } else {
        Action::Backoff { recheck: None }
    })
}
