use super::*;
use flotilla_api::policy::{Overriders, PlaintextOverrider};
use flotilla_api::selector::LabelSelector;
use serde_json::json;

fn tag(value: &str) -> ImageOverrider {
    ImageOverrider {
        component: ImageComponent::Tag,
        value: Some(value.into()),
        ..Default::default()
    }
}

fn base() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web", "kubefed.io/managed": "true"}},
        "spec": {
            "replicas": 3,
            "template": {"spec": {
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [
                    {"name": "web", "image": "registry.example:5000/team/web:1.0"},
                    {"name": "side", "image": "envoy@sha256:abc"}
                ]
            }}
        }
    })
}

fn rule(target: Option<ClusterTarget>, overriders: Overriders) -> OverrideRule {
    OverrideRule {
        target_cluster: target,
        overriders,
    }
}

fn source<'a>(name: &'a str, rules: &'a [OverrideRule]) -> OverrideSource<'a> {
    OverrideSource {
        scope: PolicyScope::Namespaced,
        namespace: Some("demo"),
        name,
        selectors: &[],
        rules,
    }
}

fn apply_all(base: &Value, ops: &[ClusterOverride]) -> Value {
    let mut out = base.clone();
    overrides::apply(&mut out, "c", ops).expect("the computed overrides apply to the base");
    out
}

#[test]
fn image_references_split_into_their_components() {
    let r = ImageRef::parse("registry.example:5000/team/web:1.0");
    assert_eq!(r.registry.as_deref(), Some("registry.example:5000"));
    assert_eq!(r.repository, "team/web");
    assert_eq!(r.tag.as_deref(), Some("1.0"));
    let r = ImageRef::parse("library/nginx");
    assert_eq!(
        (r.registry, r.repository.as_str(), r.tag),
        (None, "library/nginx", None)
    );
    let r = ImageRef::parse("localhost/app@sha256:abc");
    assert_eq!(r.registry.as_deref(), Some("localhost"));
    assert_eq!(r.digest.as_deref(), Some("sha256:abc"));
    for image in [
        "nginx",
        "nginx:1.25",
        "a.b/c/d:e@sha256:f",
        "localhost:5000/x",
    ] {
        assert_eq!(ImageRef::parse(image).to_string(), image);
    }
}

#[test]
fn an_image_overrider_changes_its_component_only() {
    let reg = ImageOverrider {
        component: ImageComponent::Registry,
        value: Some("mirror.local".into()),
        ..Default::default()
    };
    assert_eq!(
        override_image("nginx:1.25", &reg).as_deref(),
        Ok("mirror.local/nginx:1.25")
    );
    assert_eq!(
        override_image("nginx:1.25", &tag("1.26")).as_deref(),
        Ok("nginx:1.26")
    );
    let add_tag = ImageOverrider {
        operator: Some(OverrideOp::Add),
        ..tag("latest")
    };
    assert_eq!(
        override_image("nginx:1.25", &add_tag).as_deref(),
        Ok("nginx:1.25")
    );
    assert_eq!(
        override_image("nginx", &add_tag).as_deref(),
        Ok("nginx:latest")
    );
    let remove = ImageOverrider {
        operator: Some(OverrideOp::Remove),
        component: ImageComponent::Registry,
        ..Default::default()
    };
    assert_eq!(override_image("a.io/x:1", &remove).as_deref(), Ok("x:1"));
    let no_value = ImageOverrider {
        value: None,
        ..tag("")
    };
    assert!(
        override_image("x", &no_value)
            .expect_err("an error")
            .contains("needs a value")
    );
}

#[test]
fn an_image_overrider_without_a_path_changes_every_container_of_the_pod_template() {
    let rules = [rule(
        None,
        Overriders {
            image_overrider: vec![tag("2.0")],
            ..Default::default()
        },
    )];
    let ops = cluster_overrides(
        &base(),
        &[source("p", &rules)],
        &ClusterView {
            name: "c",
            labels: &BTreeMap::new(),
        },
    )
    .expect("overrides");
    let out = apply_all(&base(), &ops);
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["image"], "busybox:2.0");
    assert_eq!(
        spec["containers"][0]["image"],
        "registry.example:5000/team/web:2.0"
    );
    assert_eq!(spec["containers"][1]["image"], "envoy:2.0@sha256:abc");
    assert_eq!(ops.len(), 3, "one replace per image: {ops:?}");
}

#[test]
fn rules_apply_only_to_the_clusters_their_target_selects() {
    let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
    let rules = [
        rule(
            Some(ClusterTarget {
                label_selector: Some(LabelSelector {
                    match_labels: prod.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Overriders {
                plaintext: vec![PlaintextOverrider {
                    path: "/spec/replicas".into(),
                    operator: None,
                    value: Some(json!(10)),
                }],
                ..Default::default()
            },
        ),
        rule(
            Some(ClusterTarget {
                cluster_names: vec!["edge".into()],
                ..Default::default()
            }),
            Overriders {
                plaintext: vec![PlaintextOverrider {
                    path: "spec.replicas".into(),
                    operator: None,
                    value: Some(json!(1)),
                }],
                ..Default::default()
            },
        ),
    ];
    let p = [source("p", &rules)];
    let none = BTreeMap::new();
    let on =
        |name, labels| cluster_overrides(&base(), &p, &ClusterView { name, labels }).expect("ok");
    assert_eq!(
        apply_all(&base(), &on("big", &prod))["spec"]["replicas"],
        10
    );
    assert_eq!(
        apply_all(&base(), &on("edge", &none))["spec"]["replicas"],
        1
    );
    assert!(on("other", &none).is_empty());
}

#[test]
fn labels_and_annotations_are_added_and_removed() {
    let rules = [rule(
        None,
        Overriders {
            labels_overrider: vec![
                MapOverrider {
                    operator: None,
                    value: BTreeMap::from([("tier".into(), "front".into())]),
                },
                MapOverrider {
                    operator: Some(OverrideOp::Remove),
                    value: BTreeMap::from([("app".into(), String::new())]),
                },
            ],
            annotations_overrider: vec![MapOverrider {
                operator: Some(OverrideOp::Add),
                value: BTreeMap::from([("team/owner".into(), "web".into())]),
            }],
            ..Default::default()
        },
    )];
    let ops = cluster_overrides(
        &base(),
        &[source("p", &rules)],
        &ClusterView {
            name: "c",
            labels: &BTreeMap::new(),
        },
    )
    .expect("ok");
    let out = apply_all(&base(), &ops);
    assert_eq!(
        out["metadata"]["labels"],
        json!({"tier": "front", "kubefed.io/managed": "true"})
    );
    assert_eq!(out["metadata"]["annotations"], json!({"team/owner": "web"}));
}

#[test]
fn later_policies_win_and_one_path_is_written_once() {
    let first = [rule(
        None,
        Overriders {
            image_overrider: vec![tag("1.1")],
            ..Default::default()
        },
    )];
    let second = [rule(
        None,
        Overriders {
            image_overrider: vec![tag("1.2")],
            ..Default::default()
        },
    )];
    let cluster_wide = OverrideSource {
        scope: PolicyScope::Cluster,
        namespace: None,
        ..source("z-cluster", &first)
    };
    let obj_labels = BTreeMap::new();
    let obj = ObjectView {
        group: "apps",
        kind: "Deployment",
        namespace: Some("demo"),
        name: "web",
        labels: &obj_labels,
        annotations: &obj_labels,
    };
    let ordered = applicable(&[source("a-ns", &second), cluster_wide], &obj);
    assert_eq!(
        ordered.iter().map(|p| p.name).collect::<Vec<_>>(),
        ["z-cluster", "a-ns"]
    );
    let ops = cluster_overrides(
        &base(),
        &ordered,
        &ClusterView {
            name: "c",
            labels: &BTreeMap::new(),
        },
    )
    .expect("ok");
    assert_eq!(
        apply_all(&base(), &ops)["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example:5000/team/web:1.2"
    );
    let mut paths: Vec<_> = ops.iter().map(|o| o.path.clone()).collect();
    paths.dedup();
    assert_eq!(paths.len(), ops.len());
}

#[test]
fn a_path_into_a_missing_field_names_the_policy_rule_and_cluster() {
    let rules = [rule(
        None,
        Overriders {
            plaintext: vec![PlaintextOverrider {
                path: "/spec/nothing/here".into(),
                operator: None,
                value: Some(json!(1)),
            }],
            ..Default::default()
        },
    )];
    let err = cluster_overrides(
        &base(),
        &[source("p", &rules)],
        &ClusterView {
            name: "member1",
            labels: &BTreeMap::new(),
        },
    )
    .expect_err("an error");
    assert_eq!(err.rule, 0);
    let text = err.to_string();
    assert!(
        text.contains("OverridePolicy demo/p") && text.contains("member1"),
        "{text}"
    );
}

#[test]
fn an_image_overrider_on_a_kind_without_pods_says_so() {
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
    let rules = [rule(
        None,
        Overriders {
            image_overrider: vec![tag("1")],
            ..Default::default()
        },
    )];
    let err = cluster_overrides(
        &cm,
        &[source("p", &rules)],
        &ClusterView {
            name: "c",
            labels: &BTreeMap::new(),
        },
    )
    .expect_err("an error");
    assert!(err.message.contains("ConfigMap has none"), "{err}");
}
