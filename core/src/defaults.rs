//! Defaults the API server gives to list-map keys that server-side apply needs in the
//! applied object. kubefed synced with plain updates, so kubefed manifests routinely omit
//! Service and container ports' `protocol`; an apply of such an object fails on API
//! servers that do not publish the default in their schema ("associative list with keys
//! has an element that omits key field \"protocol\""). Filling in the value the server
//! would default to makes the same manifests apply on every version. Pure; no I/O.

use serde_json::Value;

use flotilla_api::core::ApiResource;

/// The API server's default for a port's `protocol`.
const DEFAULT_PROTOCOL: &str = "TCP";

/// Where the pod spec sits in each built-in workload kind (JSON pointers).
fn pod_spec_paths(target: &ApiResource) -> &'static [&'static str] {
    let builtin = matches!(target.group.as_str(), "" | "apps" | "batch" | "extensions");
    if !builtin {
        return &[];
    }
    match target.kind.as_str() {
        "Pod" => &["/spec"],
        "PodTemplate" => &["/template/spec"],
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => &["/spec/template/spec"],
        "CronJob" => &["/spec/jobTemplate/spec/template/spec"],
        _ => &[],
    }
}

/// Fills the defaults of list-map keys that server-side apply requires: `protocol` of a
/// Service's ports and of every container's ports in built-in workloads. Values already
/// set are kept.
pub fn fill_list_map_keys(target: &ApiResource, object: &mut Value) {
    if target.group.is_empty() && target.kind == "Service" {
        default_protocols(object.pointer_mut("/spec/ports"));
    }
    for path in pod_spec_paths(target) {
        let Some(pod) = object.pointer_mut(path) else {
            continue;
        };
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            let Some(Value::Array(containers)) = pod.get_mut(list) else {
                continue;
            };
            for c in containers {
                default_protocols(c.get_mut("ports"));
            }
        }
    }
}

fn default_protocols(ports: Option<&mut Value>) {
    let Some(Value::Array(ports)) = ports else {
        return;
    };
    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
        let missing = port.get("protocol").is_none_or(Value::is_null);
        if missing {
            port.insert("protocol".into(), DEFAULT_PROTOCOL.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::Scope;
    use serde_json::json;

    fn ar(group: &str, kind: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural_name: format!("{}s", kind.to_lowercase()),
            scope: Scope::Namespaced,
        }
    }

    #[test]
    fn service_ports_without_protocol_get_tcp_and_set_ones_are_kept() {
        let mut svc = json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        fill_list_map_keys(&ar("", "Service"), &mut svc);
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
    }

    #[test]
    fn container_ports_of_workloads_get_tcp_at_each_kinds_pod_spec() {
        let pod = json!({"containers": [{"name": "c", "ports": [{"containerPort": 80}]}],
                         "initContainers": [{"name": "i", "ports": [{"containerPort": 81}]}]});
        let mut deploy = json!({"spec": {"template": {"spec": pod.clone()}}});
        fill_list_map_keys(&ar("apps", "Deployment"), &mut deploy);
        let spec = &deploy["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["initContainers"][0]["ports"][0]["protocol"], "TCP");
        let mut cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": pod}}}}});
        fill_list_map_keys(&ar("batch", "CronJob"), &mut cron);
        assert_eq!(
            cron.pointer("/spec/jobTemplate/spec/template/spec/containers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
    }

    #[test]
    fn custom_resources_and_objects_without_ports_are_left_alone() {
        let original = json!({"spec": {"ports": [{"port": 80}]}});
        let mut custom = original.clone();
        fill_list_map_keys(&ar("example.com", "Service"), &mut custom);
        assert_eq!(custom, original);
        let mut cm = json!({"data": {"k": "v"}});
        fill_list_map_keys(&ar("", "ConfigMap"), &mut cm);
        assert_eq!(cm, json!({"data": {"k": "v"}}));
        let mut bare = json!({"spec": {}});
        fill_list_map_keys(&ar("apps", "Deployment"), &mut bare);
        assert_eq!(bare, json!({"spec": {}}));
    }
}
