//! Kubernetes Events: the one place that builds the `kube` event [`Recorder`] every
//! controller reports through, so that all of them name their reporting instance the same
//! way, and that publishes an Event within the API's limits. What is announced, and when,
//! belongs to each controller.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use tracing::debug;

/// Environment variable with the pod's name (downward API): the Event's reporting instance.
const POD_NAME_ENV: &str = "POD_NAME";

/// A recorder whose Events name `controller` as the reporting controller and, in a pod,
/// the pod as its instance.
pub fn recorder(client: Client, controller: &str) -> Recorder {
    Recorder::new(
        client,
        reporter(controller, std::env::var(POD_NAME_ENV).ok()),
    )
}

/// The events API rejects notes over 1 kB.
const NOTE_LIMIT: usize = 1000;

/// Publishes an Event about `reference`, its note cut to what the API accepts. Best
/// effort: a failure is only logged at debug level.
pub async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    emit(recorder, reference, None, type_, reason, action, note).await;
}

/// [`publish`], with a related object (`related`): Events differing only in their note are
/// one series to the recorder, so an Event that must be told apart from an earlier one of
/// the same reason (another member object, another field) names what it is about here.
pub async fn publish_related(
    recorder: &Recorder,
    reference: &ObjectReference,
    related: ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    emit(
        recorder,
        reference,
        Some(related),
        type_,
        reason,
        action,
        note,
    )
    .await;
}

async fn emit(
    recorder: &Recorder,
    reference: &ObjectReference,
    secondary: Option<ObjectReference>,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(within_limit(note)),
        action: action.to_owned(),
        secondary,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        debug!(error = %e, %reason, "publishing an event failed");
    }
}

/// `note` cut at a character boundary to at most [`NOTE_LIMIT`] bytes.
fn within_limit(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut cut = NOTE_LIMIT;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

/// The reporter of `controller`. An empty pod name (the variable set but not filled in)
/// counts as none, so that no Event names an instance called "".
fn reporter(controller: &str, pod_name: Option<String>) -> Reporter {
    Reporter {
        controller: controller.to_owned(),
        instance: pod_name.filter(|n| !n.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_character_boundary_within_the_limit() {
        let note = within_limit("é".repeat(800));
        assert!(note.len() <= NOTE_LIMIT);
        assert!(note.chars().all(|c| c == 'é'));
        assert_eq!(within_limit("short".into()), "short");
    }

    #[test]
    fn the_pod_name_becomes_the_reporting_instance_unless_it_is_empty() {
        let r = reporter("flotilla-sync", Some("flotilla-0".into()));
        assert_eq!(r.controller, "flotilla-sync");
        assert_eq!(r.instance.as_deref(), Some("flotilla-0"));
        assert_eq!(reporter("x", Some(String::new())).instance, None);
        assert_eq!(reporter("x", None).instance, None);
    }
}
