//! Kubernetes Events: the one place that builds the `kube` event [`Recorder`] every
//! controller reports through, so that all of them name their reporting instance the same
//! way. It only builds recorders; what is announced, and when, belongs to each controller.

use kube::{
    Client,
    runtime::events::{Recorder, Reporter},
};

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
    fn the_pod_name_becomes_the_reporting_instance_unless_it_is_empty() {
        let r = reporter("flotilla-sync", Some("flotilla-0".into()));
        assert_eq!(r.controller, "flotilla-sync");
        assert_eq!(r.instance.as_deref(), Some("flotilla-0"));
        assert_eq!(reporter("x", Some(String::new())).instance, None);
        assert_eq!(reporter("x", None).instance, None);
    }
}
