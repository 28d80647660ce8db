//! The Work statuses this process wrote last. The agent is the only writer of a Work's
//! status, so its own last write is newer than a Work cache that has not shown it yet: a
//! round starts from the newer of the two — the drift entries it carries forward and the
//! status its "nothing changed" check compares with. Started from a lagging cache instead,
//! a round that runs between a status write and the watch event of that write (another
//! event of the member object, a moment after a repair) writes the older status back over
//! the newer one — a repaired drift replaced by the drift before it — and once the cache
//! shows that older status, takes it as unchanged for good. A write is kept only until the
//! cache shows it, so at rest every round starts from the cache. No I/O.

use std::{collections::HashMap, sync::Mutex};

use flotilla_api::work::{Work, WorkStatus};
use kube::ResourceExt;

/// The status this process last wrote on a Work, as the host returned it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Written {
    /// The Work's UID (a Work deleted and created again under its name is another Work).
    pub uid: Option<String>,
    /// The Work's resourceVersion after the write.
    pub resource_version: Option<String>,
    /// The status the host holds after the write.
    pub status: Option<WorkStatus>,
}

impl Written {
    /// The Work the host returned for a status write.
    pub fn of(returned: &Work) -> Self {
        Written {
            uid: returned.metadata.uid.clone(),
            resource_version: returned.metadata.resource_version.clone(),
            status: returned.status.clone(),
        }
    }
}

/// Which status a round on a Work starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The cached Work's: this process wrote nothing on this very Work that it does not
    /// show.
    Cache,
    /// This process's own last write, which the cache does not show yet.
    Written,
}

/// The pure decision: the agent's own write on the same Work, unless the cache shows the
/// version that write made. A cache at another version lags the write, or shows a later
/// change of the Work's spec or metadata by the host, which leaves the status as written:
/// either way the written status is the one the host holds.
pub fn basis(cached: &Work, written: Option<&Written>) -> Basis {
    match written {
        Some(w)
            if w.uid == cached.metadata.uid
                && w.resource_version != cached.metadata.resource_version =>
        {
            Basis::Written
        }
        _ => Basis::Cache,
    }
}

/// The status writes of one agent's Works, by Work name (one namespace).
#[derive(Default)]
pub struct Reports {
    written: Mutex<HashMap<String, Written>>,
}

impl Reports {
    /// The status a round on `work` (as cached) starts from. A write the cache shows, or
    /// one on an earlier Work of the same name, is no longer needed and is forgotten.
    pub fn previous(&self, work: &Work) -> Option<WorkStatus> {
        let name = work.name_any();
        let mut written = lock(&self.written);
        match basis(work, written.get(&name)) {
            Basis::Written => written.get(&name).and_then(|w| w.status.clone()),
            Basis::Cache => {
                written.remove(&name);
                work.status.clone()
            }
        }
    }

    /// Remembers a status write: `returned`, the Work the host answered with.
    pub fn wrote(&self, returned: &Work) {
        lock(&self.written).insert(returned.name_any(), Written::of(returned));
    }

    /// Forgets the Work (it left the inventory).
    pub fn forget(&self, name: &str) {
        lock(&self.written).remove(name);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a changed status is written: by server-side apply (field manager
/// `flotilla-agent`, the host API server's cheaper path for a large Work), or by a merge
/// patch where the new status leaves out a field the previous one had — an apply does not
/// remove a field an earlier version of the agent wrote by merge patch, a merge patch with
/// `null` does.
pub fn by_merge(previous: Option<&WorkStatus>, status: &WorkStatus) -> bool {
    previous.is_some_and(|p| {
        (p.drift_policy.is_some() && status.drift_policy.is_none())
            || (!p.conditions.is_empty() && status.conditions.is_empty())
            || (!p.manifest_conditions.is_empty() && status.manifest_conditions.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use flotilla_api::{
        drift::{ClusterDrift, DriftField},
        work::{ResourceIdentifier, WorkSpec},
    };
    use flotilla_core::drift::Policy;

    use super::*;
    use crate::{
        drift::{self, Context},
        plan::{self, ManifestResult},
    };

    /// A repaired drift of `path`.
    fn repaired(path: &str) -> ClusterDrift {
        ClusterDrift {
            cluster: "member2".into(),
            state: "Repaired".into(),
            fields: vec![DriftField {
                path: path.into(),
                desired: "a".into(),
                live: "b".into(),
            }],
            ..ClusterDrift::default()
        }
    }

    /// The Deployment manifest applied, the member object at `generation`, with `drift`.
    fn result(generation: i64, drift: Option<ClusterDrift>) -> ManifestResult {
        ManifestResult {
            identifier: ResourceIdentifier {
                kind: "Deployment".into(),
                name: "web".into(),
                ..ResourceIdentifier::default()
            },
            result: Ok(()),
            hash: Some("h1".into()),
            generation: Some(generation),
            status: None,
            drift,
            member_reason: None,
            released: false,
        }
    }

    fn status(generation: i64, drift: ClusterDrift) -> WorkStatus {
        plan::work_status(None, &[result(generation, Some(drift))], Some(1), "T0")
    }

    fn work(uid: &str, version: &str, status: Option<WorkStatus>) -> Work {
        let mut w = Work::new("web", WorkSpec::default());
        w.metadata.uid = Some(uid.into());
        w.metadata.resource_version = Some(version.into());
        w.metadata.generation = Some(1);
        w.status = status;
        w
    }

    /// A round on `previous` that finds no drift (its own repair is in place), as
    /// `work::sync_work` makes it: the previous entry carried forward; the status written
    /// when it differs from `previous`.
    fn round_without_drift(previous: Option<&WorkStatus>, generation: i64) -> Option<WorkStatus> {
        let policy = Policy::default();
        let cx = Context {
            cluster: "member2",
            policy: &policy,
            previous: previous
                .and_then(|s| s.manifest_conditions.first())
                .and_then(|m| m.drift.as_ref()),
            secret: false,
        };
        let drift = drift::entry(None, false, &cx, "T1");
        let status = plan::work_status(previous, &[result(generation, drift)], Some(1), "T1");
        (previous != Some(&status)).then_some(status)
    }

    #[test]
    fn a_round_before_the_cache_shows_the_agents_own_report_keeps_it_and_writes_nothing() {
        let reports = Reports::default();
        // The scale was repaired and reported (member object at generation 3), and the
        // Work cache shows that report.
        let scale = repaired("spec.replicas");
        let cached = work("u1", "856", Some(status(3, scale.clone())));
        assert_eq!(reports.previous(&cached), cached.status);
        // The edit is repaired (generation 5) and reported: the host answers at 894.
        let edit = status(5, repaired("spec.template.spec.containers[0].image"));
        reports.wrote(&work("u1", "894", Some(edit.clone())));
        // The repair's own watch event runs a round while the Work cache is still at 856.
        // From the cache, that round would write the scale's report back over the edit's.
        let stale = round_without_drift(cached.status.as_ref(), 5).expect("a write");
        assert_eq!(stale.manifest_conditions[0].drift.as_ref(), Some(&scale));
        let previous = reports.previous(&cached);
        assert_eq!(previous.as_ref(), Some(&edit));
        assert_eq!(
            round_without_drift(previous.as_ref(), 5),
            None,
            "the edit's report stands; nothing is written"
        );
        // Once the cache shows the write, it is the basis again and the write is forgotten.
        let caught_up = work("u1", "894", Some(edit.clone()));
        assert_eq!(reports.previous(&caught_up), Some(edit));
        assert!(lock(&reports.written).is_empty());
    }

    #[test]
    fn the_cache_is_the_basis_without_a_write_it_does_not_show() {
        let cached = work("u1", "10", Some(status(1, repaired("spec.replicas"))));
        let written = Written {
            uid: Some("u1".into()),
            resource_version: Some("12".into()),
            status: None,
        };
        assert_eq!(basis(&cached, None), Basis::Cache);
        assert_eq!(basis(&cached, Some(&written)), Basis::Written);
        // The cache moved on (the host changed the Work after the write): still the write.
        assert_eq!(
            basis(&work("u1", "15", None), Some(&written)),
            Basis::Written
        );
        assert_eq!(basis(&work("u1", "12", None), Some(&written)), Basis::Cache);
        // A Work created again under the same name owes nothing to the earlier one's write.
        assert_eq!(basis(&work("u2", "20", None), Some(&written)), Basis::Cache);
        let reports = Reports::default();
        reports.wrote(&work("u1", "12", None));
        reports.forget("web");
        assert_eq!(reports.previous(&cached), cached.status);
    }

    #[test]
    fn a_status_is_applied_unless_it_drops_a_field_the_previous_one_had() {
        let policy = |p: Option<&str>| WorkStatus {
            drift_policy: p.map(str::to_owned),
            ..WorkStatus::default()
        };
        assert!(!by_merge(None, &policy(None)), "the first report");
        assert!(!by_merge(Some(&policy(None)), &policy(Some("Repair"))));
        assert!(!by_merge(
            Some(&policy(Some("Report"))),
            &policy(Some("Repair"))
        ));
        assert!(by_merge(Some(&policy(Some("Repair"))), &policy(None)));
        let with_manifests = WorkStatus {
            manifest_conditions: vec![Default::default()],
            conditions: vec![Default::default()],
            ..WorkStatus::default()
        };
        assert!(by_merge(Some(&with_manifests), &WorkStatus::default()));
        assert!(!by_merge(Some(&WorkStatus::default()), &with_manifests));
    }
}
