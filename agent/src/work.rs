//! One Work on the runner: apply its manifests, prune what left it, record what was applied
//! in its AppliedWork and report in its status — every read from the caches, every write
//! only when something changed. A Work that left the inventory has its objects pruned (or
//! only unlabelled when it was orphaned) and its AppliedWork deleted.

use std::time::Duration;

use flotilla_api::work::{
    AGENT_FIELD_MANAGER, APPLYING_ANNOTATION, AppliedResourceMeta, AppliedWork, AppliedWorkSpec,
    AppliedWorkStatus, ResourceIdentifier, WORK_COLLECT_STATUS, Work, WorkStatus,
};
use flotilla_multicluster::runner::Action;
use futures::StreamExt;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::reflector::ObjectRef,
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{
    State,
    apply::{Applied, identify},
    drift, plan,
    pruning::prune,
    records::Record,
    rejection,
};
use flotilla_api::drift::ClusterDrift;

/// How many manifests of one bundle are applied at once.
pub(super) const APPLY_CONCURRENCY: usize = 8;

/// How soon a Work whose manifests failed is tried again at first (then backing off).
const RETRY_FAILED: Duration = Duration::from_secs(2);

/// How a Work's round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// Everything is as it should be.
    Settled,
    /// Settled as far as the agent knows, but a cache has not shown its own write yet.
    Lagging,
    /// Something failed: try again.
    Failed,
}

/// One Work on the runner: a failure backs off per Work, but is tried again after
/// [`RETRY_FAILED`] at the latest while the backoff is longer; a Work whose cache lags is
/// looked at again after [`plan::LAGGING_RECHECK`] (the write's own event requeues it
/// sooner).
pub(super) async fn work(state: &State, name: &str) -> Action {
    debug!(work = %name, "processing");
    let done = match process(state, name).await {
        Ok(done) => done,
        Err(e) => {
            warn!(work = %name, error = %e, "processing the Work failed; retrying");
            Done::Failed
        }
    };
    match done {
        Done::Settled => Action::AwaitChange,
        Done::Lagging => Action::Requeue(plan::LAGGING_RECHECK),
        Done::Failed => Action::Backoff {
            recheck: Some(RETRY_FAILED),
        },
    }
}

async fn process(state: &State, name: &str) -> Result<Done, kube::Error> {
    let work = state
        .works
        .get(&ObjectRef::new(name).within(&state.namespace));
    match work {
        Some(w) => sync_work(state, &w).await,
        None => remove_work(state, name).await,
    }
}

/// The Work left the inventory: prune what it applied, then delete its AppliedWork.
async fn remove_work(state: &State, name: &str) -> Result<Done, kube::Error> {
    let record = state.records.get(name);
    if !record.exists && record.unsaved.is_empty() {
        return Ok(Done::Settled);
    }
    let orphan = state
        .orphaned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(name);
    let known = plan::known_applied(&record.applied, &record.unsaved);
    let unrecorded = plan::unrecorded(&record.intended, &known);
    let (failed, unresolved) = prune(state, name, known.iter().collect(), unrecorded, orphan).await;
    if !failed.is_empty() || !unresolved.is_empty() {
        let failed = failed.into_iter().cloned().collect();
        let unresolved = unresolved.into_iter().cloned().collect();
        state.records.still_to_prune(name, failed, unresolved);
        return Ok(Done::Failed);
    }
    state
        .applied_api
        .delete(name, &Default::default())
        .await
        .map(|_| ())
        .or_else(ignore_404)?;
    state.records.forget(name);
    state.reports.forget(name);
    state.observer.metrics.forget(name);
    state
        .orphaned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(name);
    info!(work = %name, orphan, "the Work left the inventory; its objects are removed");
    Ok(Done::Settled)
}

async fn sync_work(state: &State, work: &Work) -> Result<Done, kube::Error> {
    let name = work.name_any();
    // The newer of the cached status and this process's own last write of it.
    let previous = state.reports.previous(work);
    let Prepared {
        record,
        failed: intent_failed,
        deferred,
    } = prepare_record(state, work, &name).await;
    let known = plan::known_applied(&record.applied, &record.unsaved);
    let applied = apply_all(state, work, &name, previous.as_ref(), &deferred, &known).await;
    let mut results = Vec::new();
    let mut records = Vec::new();
    let mut lagging = false;
    for applied in applied {
        lagging |= applied.lagging;
        if applied.wrote {
            state.observer.metrics.applies.inc();
        }
        results.push(applied.result);
        records.extend(applied.record);
    }
    let current: Vec<_> = results.iter().map(|r| r.identifier.clone()).collect();
    let (pruned, intended) = prune_dropped(state, &name, &record, &current, &mut records).await;
    let record_failed = if !record.exists {
        // No AppliedWork (its creation was refused, reported as `intent_failed`): what was
        // applied is kept in memory until the creation, retried, succeeds.
        state.records.remember_unsaved(&name, records);
        None
    } else if !plan::same_records(&records, &record.applied) {
        save_record(state, &name, records, intended).await.err()
    } else {
        if !record.unsaved.is_empty() || intended != record.intended {
            state.records.remember(&name, records, intended);
        }
        None
    };
    let record_failed = intent_failed.or(record_failed);
    report(
        state,
        work,
        previous.as_ref(),
        &results,
        record_failed.as_deref(),
    )
    .await?;
    let ok = pruned
        && record_failed.is_none()
        && deferred.is_empty()
        && results.iter().all(|r| r.result.is_ok());
    if ok && !lagging {
        state.observer.metrics.settled(&name);
    }
    Ok(match (ok, lagging) {
        (false, _) => Done::Failed,
        (true, true) => Done::Lagging,
        (true, false) => Done::Settled,
    })
}

/// Applies (or releases) every manifest of the Work but the `deferred` ones: a bundle's a
/// few at a time, a legacy or MCS Work's in order. `known`: what the agent applied for the
/// Work (an object it applied stays its own to write, whatever its manifest's adoption rule).
async fn apply_all(
    state: &State,
    work: &Work,
    name: &str,
    previous: Option<&WorkStatus>,
    deferred: &[ResourceIdentifier],
    known: &[AppliedResourceMeta],
) -> Vec<Applied> {
    let collect = work
        .annotations()
        .get(WORK_COLLECT_STATUS)
        .is_some_and(|v| v == "true");
    let policy = drift::work_policy(work.annotations());
    // A bundle's manifests are of one kind and independent: applied a few at a time. A
    // legacy or MCS Work's are applied in order.
    let concurrency = if work.is_bundle() {
        APPLY_CONCURRENCY
    } else {
        1
    };
    let mut rounds: Vec<futures::future::BoxFuture<'_, Applied>> = Vec::new();
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let id = identify(i, manifest);
        if deferred.iter().any(|d| plan::same_manifest(d, &id)) {
            continue;
        }
        let config = work.manifest_config(i).cloned();
        let policy = config
            .as_ref()
            .map_or_else(|| policy.clone(), |c| drift::work_policy(&c.drift));
        let previous = previous_drift(previous, &id).cloned();
        let adoption = plan::Adoption {
            label: config.as_ref().and_then(|c| c.adopt_label.clone()),
            applied_uid: (known.iter())
                .find(|k| plan::same_manifest(&k.identifier, &id))
                .map(|k| k.uid.clone())
                .filter(|uid| !uid.is_empty()),
        };
        let name = name.to_owned();
        rounds.push(Box::pin(async move {
            if config.is_some_and(|c| c.orphan) {
                return state.member.release(i, manifest).await;
            }
            let cx = drift::Context {
                cluster: &state.cluster,
                policy: &policy,
                previous: previous.as_ref(),
                secret: flotilla_core::redact::is_secret_object(manifest),
            };
            state
                .member
                .apply_manifest(&name, i, manifest, collect, &cx, &adoption)
                .await
        }));
    }
    futures::stream::iter(rounds)
        .buffered(concurrency)
        .collect()
        .await
}

/// The Work's record as a round starts, and what the round may apply.
struct Prepared {
    record: Record,
    /// Why the record could not be created or name the objects about to be applied.
    failed: Option<String>,
    /// Manifests left for a later round: naming them would overflow the annotation.
    deferred: Vec<ResourceIdentifier>,
}

/// The Work's record before its manifests are applied: created with the manifests as
/// intended when it does not exist; else, when a manifest is neither intended nor recorded
/// yet, its intended objects written first (one request), so that an agent stopped
/// between applying and recording it still finds it — as many new ones as the annotation
/// holds, the others deferred ([`super::intent::within_bound`]). A refused creation or
/// intent write does not hold the bundle back (what is applied is kept in memory
/// meanwhile, and pruned all the same should it leave): it is returned, to be reported on
/// the Work and retried. What this gives up while the member refuses: an agent restarted
/// meanwhile no longer knows what it applied that no record names, should the Work leave
/// while it is away.
async fn prepare_record(state: &State, work: &Work, name: &str) -> Prepared {
    let mut record = state.records.get(name);
    let current = intended(work);
    let prepared = |record, failed, deferred| Prepared {
        record,
        failed,
        deferred,
    };
    if !record.exists {
        let unsaved = std::mem::take(&mut record.unsaved);
        return match create_record(state, name, &current).await {
            Ok(created) => prepared(Record { unsaved, ..created }, None, Vec::new()),
            Err(e) => {
                warn!(work = %name, error = %e, "creating the Work's AppliedWork failed; applying all the same");
                let failed = format!(
                    "creating AppliedWork {name}, the record of what is applied: {}",
                    super::apply::message(&e)
                );
                prepared(Record { unsaved, ..record }, Some(failed), Vec::new())
            }
        };
    }
    let known = plan::known_applied(&record.applied, &record.unsaved);
    let Some(update) = plan::intent_update(&record.intended, &known, &current) else {
        return prepared(record, None, Vec::new());
    };
    // Objects named before stay named (they may have been applied); new ones as room allows.
    let (named, new): (Vec<_>, Vec<_>) = update
        .into_iter()
        .partition(|u| record.intended.iter().any(|i| plan::same_manifest(i, u)));
    let (intended, deferred) = super::intent::within_bound(APPLYING_ANNOTATION, &named, &new);
    let applying = super::intent::encode(&intended);
    let patch = json!({"metadata": {"annotations": {APPLYING_ANNOTATION: applying}}});
    match state
        .applied_api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            record.intended = intended;
            state.records.remember_intended(name, &record);
            prepared(record, None, deferred)
        }
        Err(e) => {
            warn!(work = %name, error = %e, "recording the objects about to be applied failed");
            let failed = format!(
                "naming the objects about to be applied in AppliedWork {name}: {}",
                super::apply::message(&e)
            );
            // Nothing is named: as with any refused record write, all is applied.
            prepared(record, Some(failed), Vec::new())
        }
    }
}

/// Prunes what the agent applied for the Work (recorded or not) that left its manifests
/// (`current`), and completes `records` with what stays: an object that could not be
/// pruned, or whose manifest failed this round, is never lost. An object the record names
/// as intended but never recorded (an agent stopped between applying and recording it)
/// that left the manifests is pruned if the agent wrote it. Returns whether every prune
/// succeeded, and the intended objects still to keep (the current ones and those whose
/// prune failed).
async fn prune_dropped(
    state: &State,
    name: &str,
    record: &Record,
    current: &[ResourceIdentifier],
    records: &mut Vec<AppliedResourceMeta>,
) -> (bool, Vec<ResourceIdentifier>) {
    let known = plan::known_applied(&record.applied, &record.unsaved);
    let is_current = |id: &ResourceIdentifier| current.iter().any(|c| plan::same_manifest(c, id));
    let gone = plan::to_prune(&known, current);
    let unrecorded: Vec<_> = (plan::unrecorded(&record.intended, &known).into_iter())
        .filter(|id| !is_current(id))
        .collect();
    let (failed, unresolved) = prune(state, name, gone, unrecorded, false).await;
    records.extend(failed.iter().map(|g| (*g).clone()));
    let ok = failed.is_empty() && unresolved.is_empty();
    for p in &known {
        let listed = current.iter().any(|c| plan::same_object(&p.identifier, c));
        let recorded = records
            .iter()
            .any(|r| plan::same_object(&p.identifier, &r.identifier));
        if listed && !recorded {
            records.push(p.clone());
        }
    }
    let intended = record
        .intended
        .iter()
        .filter(|i| is_current(i) || unresolved.iter().any(|u| plan::same_manifest(u, i)))
        .cloned()
        .collect();
    (ok, intended)
}

/// Records what was applied in the Work's AppliedWork. When that fails, what was applied
/// is kept in memory instead (a Work removed before the retry still prunes it), an
/// AppliedWork found gone is created again on the retry, and the failure is returned (to
/// be reported on the Work; the Work's other results are not held back).
async fn save_record(
    state: &State,
    name: &str,
    applied: Vec<AppliedResourceMeta>,
    intended: Vec<ResourceIdentifier>,
) -> Result<(), String> {
    let patch = json!({"status": AppliedWorkStatus { applied_resources: applied.clone() }});
    match state
        .applied_api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            state.records.remember(name, applied, intended);
            Ok(())
        }
        Err(e) => {
            warn!(work = %name, error = %e, "recording what was applied failed");
            state.records.remember_unsaved(name, applied);
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                state.records.lost(name);
            }
            Err(format!(
                "recording what was applied in AppliedWork {name}: {}",
                super::apply::message(&e)
            ))
        }
    }
}

/// The objects of the Work's manifests, for its AppliedWork's [`APPLYING_ANNOTATION`].
fn intended(work: &Work) -> Vec<ResourceIdentifier> {
    work.spec
        .workload
        .manifests
        .iter()
        .enumerate()
        .map(|(i, m)| identify(i, m))
        .collect()
}

/// The `drift` entry the agent last reported for the manifest of object `id` (found by
/// the object, not the ordinal: a bundle's ordinals shift as objects come and go).
fn previous_drift<'a>(
    previous: Option<&'a WorkStatus>,
    id: &ResourceIdentifier,
) -> Option<&'a ClusterDrift> {
    previous?
        .manifest_conditions
        .iter()
        .find(|m| plan::same_manifest(&m.identifier, id))?
        .drift
        .as_ref()
}

/// Creates the Work's AppliedWork (nothing applied yet), naming the objects about to be
/// applied (`intended`) in the same request: should the agent stop between an apply and
/// its record, a restart still finds them. One that exists already (the cache had not
/// shown it) is read and taken over with what it records; one of another namespace's Work
/// of the same name is a conflict, retried.
async fn create_record(
    state: &State,
    name: &str,
    intended: &[ResourceIdentifier],
) -> Result<Record, kube::Error> {
    let mut record = AppliedWork::new(
        name,
        AppliedWorkSpec {
            work_name: name.to_owned(),
            work_namespace: state.namespace.clone(),
        },
    );
    let applying = super::intent::encode(intended);
    record
        .annotations_mut()
        .insert(APPLYING_ANNOTATION.to_owned(), applying);
    match state
        .applied_api
        .create(&PostParams::default(), &record)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let found = state.applied_api.get(name).await?;
            return state
                .records
                .adopt(name, &found, intended)
                .ok_or(kube::Error::Api(s));
        }
        Err(e) => return Err(e),
    }
    state.records.remember(name, Vec::new(), intended.to_vec());
    Ok(Record {
        exists: true,
        intended: intended.to_vec(),
        ..Record::default()
    })
}

/// The Work's status, written only when it changed from `previous`, the status the round
/// started from ([`super::reports`]).
async fn report(
    state: &State,
    work: &Work,
    previous: Option<&WorkStatus>,
    results: &[plan::ManifestResult],
    record_failed: Option<&str>,
) -> Result<(), kube::Error> {
    let (generation, now) = (work.metadata.generation, now_rfc3339());
    let status = plan::work_status(previous, results, generation, &now);
    let status = rejection::with_rejections(status, previous, results, generation, &now);
    let mut status = plan::with_record_failure(status, previous, record_failed, generation, &now);
    status.drift_policy = drift::applied_policy(work.annotations());
    state
        .observer
        .report_failures(work, previous, results)
        .await;
    if previous != Some(&status) {
        let name = work.name_any();
        let (params, patch) = if super::reports::by_merge(previous, &status) {
            let mut body = json!({"status": status});
            if status.drift_policy.is_none() {
                // A merge patch keeps an absent key: a policy the Work no longer carries goes.
                body["status"]["driftPolicy"] = serde_json::Value::Null;
            }
            (PatchParams::default(), Patch::Merge(body))
        } else {
            let api_version = <Work as kube::Resource>::api_version(&());
            let body = json!({"apiVersion": api_version, "kind": "Work", "status": status});
            (
                PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                Patch::Apply(body),
            )
        };
        let written = match (state.works_api).patch_status(&name, &params, &patch).await {
            Ok(written) => written,
            Err(e) if work_gone(&e) => {
                // Deleted while it was applied: its removal comes with the cache's event,
                // and retrying the report before it would fail again.
                debug!(work = %name, "the Work is gone; its report is not written");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        state.reports.wrote(&written);
    }
    Ok(())
}

/// Whether `e` says the Work itself is gone (a 404 naming a Work).
fn work_gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "works")
        }
        _ => false,
    }
}

fn ignore_404(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        e => Err(e),
    }
}

fn now_rfc3339() -> String {
    use k8s_openapi::jiff::{Timestamp, Unit};
    Timestamp::now()
        .round(Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| Timestamp::now().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{Status, response::StatusDetails};

    fn not_found(kind: &str) -> kube::Error {
        let mut s = Status::failure("not found", "NotFound");
        s.code = 404;
        s.details = Some(StatusDetails {
            name: "w".into(),
            group: "multicluster.x-k8s.io".into(),
            kind: kind.into(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        });
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn only_a_404_naming_a_work_says_the_work_is_gone() {
        assert!(work_gone(&not_found("works")));
        assert!(!work_gone(&not_found("appliedworks")));
        let mut conflict = Status::failure("conflict", "Conflict");
        conflict.code = 409;
        assert!(!work_gone(&kube::Error::Api(Box::new(conflict))));
    }
}
