//! One type's sync controller as its workers see it ([`Ctl`]): what it holds (the type's
//! description, the host caches, the member caches, what it remembers) and the
//! orchestration of one reconcile — the entry branching, the live path's stages, the
//! deletion's. Each concern gets only the narrow input it reads, built here ([`Observer`],
//! [`Works`], [`StatusWriter`], [`Rollout`], [`Dependencies`], [`MemberWrites`],
//! [`Deletion`], [`Reporter`]); none of them sees a `Ctl`. The federated input of a
//! reconcile — what the placement pipeline reads ([`pipeline::Input`]) — is built here
//! alone ([`Ctl::pipeline`], [`Ctl::selected`]). Decisions are in [`super::plan`].

use std::{collections::BTreeSet, sync::Arc};

use flotilla_api::{
    RECREATE_ON_IMMUTABLE_ANNOTATION,
    core::EffectiveConfig,
    federated::{FederatedSpec, FederatedStatus},
};
use kube::{ResourceExt, core::DynamicObject};
use tracing::{info, instrument, warn};

use super::{
    Key, SyncShared,
    action::{Action, Error},
    cluster_run::{MemberWrites, WriteContext},
    deletion::{self, Deletion, DeletionContext},
    dependencies::{self, Dependencies},
    drift::{self, DriftContext},
    finalizer::{self, has_finalizer},
    host::{HostCaches, host_namespace_uid},
    inflight::InFlight,
    memory::{Availability, DriftMemory, FinalizerAdds, RecentWrites, WrittenStatus},
    observe::Observer,
    plan::{
        DesiredSet, Observed, deletion as deletion_plan,
        pipeline::{self, NamespacePlacement},
    },
    pull::Works,
    reconcile::{self, LiveRound, Reporter, member_specs, remote_statuses},
    rollout::{Members, RevisionStore, Rollout},
    status::{Events, StatusWriter},
    strays,
    twins::{self, TwinCheck},
    type_info::TypeInfo,
};
use crate::multicluster::{ClusterState, MemberWatch};

/// One federated type's sync controller, as its workers see it.
pub(super) struct Ctl {
    shared: Arc<SyncShared>,
    /// What is propagated: the APIs, scope and status handling of the type.
    ty: Arc<TypeInfo>,
    /// The host-side caches read (federated objects, twin, FederatedNamespaces, Works).
    host: Arc<HostCaches>,
    /// The target kind's managed objects in every Ready member.
    members: Arc<MemberWatch<DynamicObject>>,
    /// Flotilla's own recent member writes.
    recent: Arc<RecentWrites>,
    /// Finalizer patches the host cache has not delivered yet.
    finalizer_adds: FinalizerAdds,
    /// Member writes that went on after their reconcile.
    inflight: Arc<InFlight>,
    /// Our last status write per object, while the host cache has not delivered it.
    written: WrittenStatus,
    /// Since when each cluster has been unavailable.
    availability: Availability,
    /// Recent repairs (fights) and announced drift-policy errors.
    drift_memory: DriftMemory,
    /// The Pull clusters' bundle writes.
    bundler: Arc<super::bundles::Bundler>,
    /// The Pull clusters' canary Deployments (a Deployment type).
    canaries: Option<Arc<super::rollout::PullCanaries>>,
}

/// The narrow inputs: each concern's view of what the controller holds.
impl Ctl {
    /// The controller of `ty`, reading `host` and `members`, remembering in `recent` and
    /// `inflight` (shared with the watches that follow them).
    pub fn new(
        shared: Arc<SyncShared>,
        ty: Arc<TypeInfo>,
        host: Arc<HostCaches>,
        members: Arc<MemberWatch<DynamicObject>>,
        recent: Arc<RecentWrites>,
        inflight: Arc<InFlight>,
        bundler: Arc<super::bundles::Bundler>,
    ) -> Self {
        Ctl {
            bundler,
            canaries: None,
            shared,
            ty,
            host,
            members,
            recent,
            finalizer_adds: FinalizerAdds::default(),
            inflight,
            written: WrittenStatus::default(),
            availability: Availability::default(),
            drift_memory: DriftMemory::default(),
        }
    }

    fn config(&self) -> EffectiveConfig {
        self.shared.config.borrow().clone()
    }

    fn events(&self) -> Events<'_> {
        Events {
            recorder: &self.shared.recorder,
            fed_ar: &self.ty.fed_ar,
        }
    }

    fn status(&self) -> StatusWriter<'_> {
        StatusWriter {
            host: &self.shared.host,
            ty: &self.ty,
            written: &self.written,
            metrics: &self.shared.metrics.sync,
            events: self.events(),
        }
    }

    fn observer(&self) -> Observer<'_> {
        Observer {
            members: &self.members,
            host: &self.host,
            ty: &self.ty,
            availability: &self.availability,
        }
    }

    /// The controller carrying its canary Deployments to Pull clusters through `canaries`.
    pub fn with_canaries(mut self, canaries: Option<Arc<super::rollout::PullCanaries>>) -> Self {
        self.canaries = canaries;
        self
    }

    fn works(&self) -> Works<'_> {
        Works {
            shared: &self.shared,
            host: &self.host,
            ty: &self.ty,
            bundler: &self.bundler,
            canaries: self.canaries.as_deref(),
        }
    }

    fn revisions(&self) -> RevisionStore<'_> {
        RevisionStore {
            host: &self.shared.host,
            known: &self.shared.revisions,
            namespace: &self.shared.namespace,
            ty: &self.ty,
        }
    }

    fn rollout(&self) -> Rollout<'_> {
        Rollout {
            shared: &self.shared,
            ty: &self.ty,
            revisions: self.revisions(),
            written: &self.written,
            observer: self.observer(),
            canaries: self.canaries.as_deref(),
        }
    }

    fn dependencies(&self) -> Dependencies<'_> {
        Dependencies {
            host: &self.shared.host,
            hosts: &self.shared.dependency_hosts,
            pull: &self.shared.pull_dependencies,
            clusters: &self.shared.clusters,
            ty: &self.ty,
            events: self.events(),
        }
    }

    fn member_writes(&self) -> MemberWrites<'_> {
        MemberWrites {
            shared: &self.shared,
            ty: &self.ty,
            works: self.works(),
            recent: &self.recent,
            inflight: &self.inflight,
        }
    }

    fn deletion(&self) -> Deletion<'_> {
        Deletion {
            shared: &self.shared,
            ty: &self.ty,
            observer: self.observer(),
            works: self.works(),
        }
    }

    fn reporter(&self) -> Reporter<'_> {
        Reporter {
            status: self.status(),
            decisions: &self.shared.decisions,
            namespace: &self.shared.namespace,
        }
    }
}

/// The federated input: what the placement pipeline reads for one object.
impl Ctl {
    /// The namespace placement of an object of `key`, from the FederatedNamespace cache.
    fn namespace_placement(&self, key: &Key) -> NamespacePlacement {
        let scope = self.config().scope;
        self.host
            .namespace_placement(key, self.ty.needs_ns_placement, &scope)
    }

    /// Runs the placement → scheduling → desired-objects pipeline for one object, with
    /// `clusters` as the one snapshot of the registry it reads.
    fn pipeline(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
    ) -> pipeline::Outcome {
        self.with_input(key, spec, previous, clusters, pipeline::run)
    }

    /// The clusters the pipeline selects for the object, without its desired objects (what
    /// a deletion needs to know).
    fn selected(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
    ) -> BTreeSet<String> {
        self.with_input(key, spec, previous, clusters, pipeline::selected)
    }

    /// Calls `f` with the pipeline's input for one object, built from this type's caches
    /// and configuration.
    fn with_input<R>(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
        f: impl FnOnce(&pipeline::Input<'_>) -> R,
    ) -> R {
        let target = self.ty.target_type_api();
        let namespace_placement = self.namespace_placement(key);
        f(&pipeline::Input {
            target: &target,
            name: &key.1,
            namespace: key.0.as_deref(),
            spec,
            previous,
            clusters,
            namespace_placement: &namespace_placement,
            collect_status: self.ty.collect_status,
            default_unreachable_seconds: self.config().default_unreachable_toleration_seconds,
        })
    }
}

/// The orchestration of one reconcile.
impl Ctl {
    /// Reconciles one key: gone → strays, deleting → deletion, no finalizer → add it,
    /// else the live path.
    #[instrument(skip(self), fields(
        kind = %self.ty.fed_ar.kind,
        name = %key.1,
        namespace = key.0.as_deref().unwrap_or_default(),
        trace_id = tracing::field::Empty,
    ))]
    pub async fn reconcile(&self, key: &Key) -> Result<Action, Error> {
        super::trace_id::record(&tracing::Span::current());
        let Some(fed) = self.host.federated(key) else {
            if self.host.twin(key).is_some() {
                // The member objects are the twin's (kubefed's alpha or v1beta1), not strays.
                return Ok(Action::AwaitChange);
            }
            return strays::clean(&self.shared, &self.ty, &self.members, self.works(), key).await;
        };
        let (host, ty) = (&self.shared.host, &*self.ty);
        if ty.is_namespace_type && key.0.as_deref() != Some(key.1.as_str()) {
            return reconcile::invalid_namespace_name(host, ty, self.events(), &fed).await;
        }
        if fed.metadata.deletion_timestamp.is_some() {
            if twins::releases_on_delete(ty, &fed, self.host.twin(key).as_deref()) {
                return twins::release(host, ty, self.events(), &fed).await;
            }
            return self.ensure_deletion(key, &fed).await;
        }
        // A live object of this name again: an older orphaning deletion no longer decides.
        self.shared.orphans.forget(&ty.fed_ar.kind, key);
        if !has_finalizer(&fed) {
            let base = fed.resource_version().unwrap_or_default();
            if !self.finalizer_adds.lagging(key, &base) {
                finalizer::add(host, ty, &fed).await?;
                self.finalizer_adds.remember(key.clone(), base);
            }
            // Propagation continues on the watch event of the patched object.
            return Ok(Action::AwaitChange);
        }
        let conflict = match twins::check(ty, key, &fed, self.host.twin(key).as_deref()) {
            TwinCheck::Alone => None,
            TwinCheck::Yields(message) => {
                return Ok(twins::report_yielding(&self.status(), &fed, message).await);
            }
            TwinCheck::Propagates(message) => Some(message),
        };
        Ok(self.sync(key, &fed, conflict).await)
    }

    /// The live path: bring every member in line with the federated object. `conflict`:
    /// the message of a twin conflict this object wins (it still propagates, and says so).
    async fn sync(&self, key: &Key, fed: &DynamicObject, conflict: Option<String>) -> Action {
        let previous = FederatedStatus::from_dynamic(fed);
        let generation = fed.metadata.generation.unwrap_or(0);
        let spec = match FederatedSpec::from_dynamic(fed) {
            Ok(s) => s,
            Err(e) => {
                let status = self.status();
                (status.report_malformed(fed, &previous, generation, e.to_string())).await;
                return Action::AwaitChange;
            }
        };
        let snapshot = self.shared.clusters.snapshot();
        let pipeline::Outcome {
            selected,
            decision,
            failure: aggregate,
            desired,
        } = self.pipeline(key, &spec, &previous, &snapshot);
        let observer = self.observer();
        let observed: Vec<Observed> = snapshot.iter().map(|c| observer.observe(c, key)).collect();
        let members = Members {
            snapshot: &snapshot,
            observed: &observed,
        };
        let mut desired = desired;
        let rollout = (self.rollout())
            .progressive(key, fed, &spec, members, &mut desired)
            .await;
        if generation != previous.observed_generation {
            reconcile::announce_dropped_metadata(self.events(), fed, &desired).await;
        }
        let remote = remote_statuses(self.ty.collect_status, &snapshot, &observed);
        let member_specs = member_specs(self.ty.health.is_some(), &snapshot, &observed);
        let (host, ty) = (&self.shared.host, &self.ty);
        let removing =
            reconcile::host_uid_if_removing(host, ty, key, &snapshot, &observed, &selected);
        let Ok(host_ns_uid) = removing.await.inspect_err(|e| {
            warn!(error = %e, "reading the host namespace failed");
        }) else {
            return Action::Backoff { recheck: None };
        };
        let cx = self
            .write_context(key, fed, &spec, &desired, &previous)
            .await;
        let lands = dependencies::lands_on(&selected, &desired);
        let dependencies = (self.dependencies())
            .follow(key, fed, &spec, &previous, &snapshot, &lands)
            .await;
        let round = (self.member_writes())
            .propagate(&snapshot, observed, &selected, host_ns_uid.as_deref(), &cx)
            .await;
        let live = LiveRound {
            previous: &previous,
            generation,
            spec: &spec,
            snapshot: &snapshot,
            desired: &desired,
            aggregate,
            decision: decision.as_ref(),
            conflict,
            rollout: rollout.as_ref(),
            dependencies,
            remote,
            member_specs,
            round,
        };
        self.reporter().report(fed, live).await
    }

    /// The facts every cluster's write needs in this round (the drift policy announced
    /// when it cannot be read).
    async fn write_context<'a>(
        &'a self,
        key: &'a Key,
        fed: &'a DynamicObject,
        spec: &FederatedSpec,
        desired: &'a DesiredSet,
        previous: &FederatedStatus,
    ) -> WriteContext<'a> {
        let policy = drift::policy(&self.drift_memory, self.events(), key, fed).await;
        WriteContext {
            key,
            fed,
            desired,
            retain_replicas: spec.retain_replicas,
            adopt: self.config().adopt_resources,
            recreate: fed
                .annotations()
                .get(RECREATE_ON_IMMUTABLE_ANNOTATION)
                .is_some_and(|v| v == "true"),
            delete_params: super::delete_options::of_object(fed),
            drift: DriftContext {
                ty: &self.ty,
                memory: &self.drift_memory,
                key,
                policy,
                retain_replicas: spec.retain_replicas,
                previous: drift::previous_drift(&self.written, key, fed, previous),
            },
        }
    }

    /// The federated object is being deleted: remove (or orphan) its member objects (see
    /// [`Deletion::run`]), then drop the finalizer.
    async fn ensure_deletion(&self, key: &Key, fed: &DynamicObject) -> Result<Action, Error> {
        if !has_finalizer(fed) {
            return Ok(Action::AwaitChange);
        }
        let previous = FederatedStatus::from_dynamic(fed);
        // Unknown whether a member is the host itself: delete nothing yet.
        let host_ns_uid = host_namespace_uid(&self.shared.host, &self.ty, key).await?;
        let selected = FederatedSpec::from_dynamic(fed).ok().map(|spec| {
            let clusters = self.shared.clusters.snapshot();
            self.selected(key, &spec, &previous, &clusters)
        });
        let protected = self.ty.is_protected(key, &self.shared.namespace);
        let config = self.config();
        let cx = DeletionContext::new(&config, protected, fed, &previous, selected, host_ns_uid);
        let round = self.deletion().run(key, &cx).await;
        if !round.pending {
            self.finish_deletion(key, fed, &round.abandoned, &cx)
                .await?;
            return Ok(Action::AwaitChange);
        }
        if deletion_plan::writes_status(round.held, &round.outcomes) {
            deletion::write_status(&self.status(), fed, &previous, &round.outcomes).await;
        }
        Ok(Action::Requeue(deletion_plan::recheck_after(
            round.next_deadline,
        )))
    }

    /// Nothing is pending any more: warn about clusters given up on, let go of the
    /// dependencies and the revisions, drop the finalizer.
    async fn finish_deletion(
        &self,
        key: &Key,
        fed: &DynamicObject,
        abandoned: &[String],
        cx: &DeletionContext,
    ) -> Result<(), Error> {
        // Before the finalizer goes: once it has, the member copies look like strays.
        self.shared
            .orphans
            .deleted(&self.ty.fed_ar.kind, key, abandoned, cx.keep);
        if !abandoned.is_empty() {
            deletion::announce_abandoned(self.events(), &self.ty, key, fed, abandoned, cx).await;
        }
        if !cx.keep {
            self.dependencies().release(key, fed).await;
        }
        self.revisions().remove(key, fed).await?;
        finalizer::remove(&self.shared.host, &self.ty, fed).await?;
        info!(object = ?key, orphan = cx.keep, "member objects removed; finalizer dropped");
        Ok(())
    }
}
