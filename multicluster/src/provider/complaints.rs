//! Warning Events about the objects a provider cannot use (a Secret whose kubeconfig does
//! not parse, a ClusterProfile whose access provider fails), in the object's own cluster:
//! one per version of the object and reason, so a broken object is announced once, not at
//! every change of its neighbours. The reasons never quote a credential.

use std::collections::HashSet;

use kube::{
    Client, Resource, ResourceExt,
    runtime::events::{EventType, Recorder},
};

/// What a provider has announced so far.
pub(crate) struct Complaints {
    recorder: Recorder,
    reason: &'static str,
    sent: HashSet<(String, String, String)>,
}

impl Complaints {
    /// Events reported as `controller`, with reason `reason` (CamelCase).
    pub(crate) fn new(client: Client, controller: &str, reason: &'static str) -> Self {
        Complaints {
            recorder: crate::events::recorder(client, controller),
            reason,
            sent: HashSet::new(),
        }
    }

    /// Announces `note` about `obj`, unless already announced for this version of it.
    pub(crate) async fn about<K: Resource<DynamicType = ()>>(&mut self, obj: &K, note: &str) {
        let version = (
            obj.uid().unwrap_or_default(),
            obj.resource_version().unwrap_or_default(),
            note.to_owned(),
        );
        if !self.sent.insert(version) {
            return;
        }
        let reference = obj.object_ref(&());
        let (reason, action) = (self.reason, "Engage");
        crate::events::publish(
            &self.recorder,
            &reference,
            EventType::Warning,
            reason,
            action,
            note.to_owned(),
        )
        .await;
    }
}
