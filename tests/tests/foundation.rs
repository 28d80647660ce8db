//! Foundation: the local clusters every other integration test builds on start, isolate
//! clusters, verify TLS, serve custom resources, survive an apiserver restart, and leave
//! nothing behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_localenv::HostSeed;
use flotilla_tests::{EnvOptions, LocalEnv, env, env_with, init_tracing, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::json;

fn config_map(name: &str, namespace: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("value".to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn host_and_two_members_start_and_serve_each_their_own_objects_over_verified_tls()
-> anyhow::Result<()> {
    init_tracing();
    let started = Instant::now();
    let env = LocalEnv::start(EnvOptions::with_members(2)).await?;
    eprintln!(
        "start-up of host + 2 members (apiservers ready, controller-managers working): {:?}",
        started.elapsed()
    );
    assert_eq!(env.host().name(), "host");
    let names: Vec<&str> = env.members().iter().map(|m| m.name()).collect();
    assert_eq!(names, ["member1", "member2"]);

    for member in env.members() {
        let client = member.client().await?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace("foundation"))
            .await?;
        let name = format!("greeting-{}", member.name());
        let config_maps: Api<ConfigMap> = Api::namespaced(client, "foundation");
        config_maps
            .create(
                &PostParams::default(),
                &config_map(&name, "foundation", member.name()),
            )
            .await?;
        let read = config_maps.get(&name).await?;
        assert_eq!(
            read.data.and_then(|d| d.get("value").cloned()).as_deref(),
            Some(member.name())
        );
    }

    // Each cluster has its own etcd prefix: the host sees neither namespace.
    let host = env.host().client().await?;
    assert!(
        Api::<Namespace>::all(host)
            .get_opt("foundation")
            .await?
            .is_none()
    );

    // TLS is verified: member2's server is rejected when trusting member1's CA.
    let mut wrong_ca = env.members()[1].kube_config();
    wrong_ca.root_cert = env.members()[0].kube_config().root_cert;
    let untrusting = Client::try_from(wrong_ca)?;
    assert!(
        Api::<Namespace>::all(untrusting)
            .list(&ListParams::default())
            .await
            .is_err()
    );

    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["--context", "member2", "get", "configmaps", "-A"])
        .output()
        .await
        .context("running kubectl")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("greeting-member2"),
        "kubectl output:\n{stdout}"
    );
    assert!(
        !stdout.contains("greeting-member1"),
        "kubectl output:\n{stdout}"
    );

    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn custom_resources_of_an_installed_definition_can_be_created_updated_and_listed()
-> anyhow::Result<()> {
    let env = env(0).await;
    let client = env.host().client().await?;
    let crd = widget_crd()?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await?;
    wait_established(&crds).await?;

    let gvk = GroupVersionKind::gvk("demo.flotilla.io", "v1alpha1", "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let widget = DynamicObject::new("blue", &resource)
        .within("default")
        .data(json!({ "spec": { "size": 1, "color": "blue", "unknown": "pruned" } }));
    // The first decode of a custom resource is what crashes an apiserver built without the
    // reflect2 fix.
    let created = wait_for(
        Duration::from_secs(10),
        "the widget to be created",
        || async { Ok(widgets.create(&PostParams::default(), &widget).await?) },
    )
    .await?;
    assert_eq!(created.data["spec"]["size"], 1);
    assert!(
        created.data["spec"].get("unknown").is_none(),
        "structural schema prunes unknown fields"
    );

    let mut fetched = widgets.get("blue").await?;
    fetched.data["spec"]["size"] = json!(2);
    widgets
        .replace("blue", &PostParams::default(), &fetched)
        .await?;

    let listed = widgets.list(&ListParams::default()).await?;
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("blue"));
    assert_eq!(listed.items[0].data["spec"]["size"], 2);
    assert_eq!(listed.items[0].data["spec"]["color"], "blue");

    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_stopped_member_apiserver_refuses_requests_and_restarts_with_its_data()
-> anyhow::Result<()> {
    let env = env(1).await;
    let member = env.cluster("member1").context("member1 exists")?.clone();
    let port = member.port();
    let config_maps: Api<ConfigMap> = Api::namespaced(member.client().await?, "default");
    config_maps
        .create(
            &PostParams::default(),
            &config_map("survivor", "default", "kept"),
        )
        .await?;

    env.stop_apiserver("member1").await?;
    let during_outage: Api<ConfigMap> = Api::namespaced(member.client().await?, "default");
    assert!(during_outage.get("survivor").await.is_err());
    // The outage is member1's alone.
    Api::<Namespace>::all(env.host().client().await?)
        .list(&ListParams::default())
        .await?;

    env.start_apiserver("member1").await?;
    let restarted = env.cluster("member1").context("member1 exists")?;
    assert_eq!(restarted.port(), port);
    let after: Api<ConfigMap> = Api::namespaced(restarted.client().await?, "default");
    let survivor = after.get("survivor").await?;
    assert_eq!(
        survivor
            .data
            .and_then(|d| d.get("value").cloned())
            .as_deref(),
        Some("kept")
    );

    env.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn an_apiserver_that_cannot_start_fails_start_up_with_the_end_of_its_log() {
    init_tracing();
    let options = EnvOptions {
        members: 0,
        extra_apiserver_args: vec!["--no-such-flag=1".into()],
        ..EnvOptions::default()
    };
    let error = match LocalEnv::start(options).await {
        Ok(_) => panic!("an apiserver with an unknown flag started"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("apiserver host exited"), "{error}");
    assert!(error.contains("unknown flag: --no-such-flag"), "{error}");
}

#[tokio::test]
async fn dropping_the_env_leaves_no_process_and_no_directory() {
    let env = env(1).await;
    let pids = env.pids();
    // etcd, and an apiserver and a controller-manager for each of host and member1.
    assert_eq!(pids.len(), 5, "pids: {pids:?}");
    assert!(pids.iter().all(|&pid| is_alive(pid)));
    let dir = env.dir().to_path_buf();
    assert!(dir.is_dir());

    drop(env);

    let alive: Vec<u32> = pids.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still running: {alive:?}");
    assert!(!dir.exists(), "{} still exists", dir.display());
}

#[test]
fn a_panicking_test_body_still_stops_every_process() {
    let (report, reported) = std::sync::mpsc::channel::<(Vec<u32>, PathBuf)>();
    let body = std::thread::Builder::new().name("panicking-test-body".into());
    let outcome = body
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let env = env(0).await;
                let _ = report.send((env.pids(), env.dir().to_path_buf()));
                panic!("the test body fails while it owns the environment");
            })
        })
        .expect("a thread for the test body")
        .join();
    assert!(outcome.is_err(), "the body panicked");

    let (pids, dir) = reported
        .recv()
        .expect("the body reported its processes before panicking");
    assert_eq!(pids.len(), 3, "pids: {pids:?}");
    let alive: Vec<u32> = pids.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still running: {alive:?}");
    assert!(!dir.exists(), "{} still exists", dir.display());
}

/// The "current API" profile (the default): the betas Kubernetes 1.22 and 1.25 removed are
/// not served, their GA versions are, and the betas v1.20 has no GA version of stay on.
#[tokio::test]
async fn the_apiservers_serve_todays_api_surface_without_the_removed_betas() -> anyhow::Result<()> {
    init_tracing();
    let options = EnvOptions {
        members: 0,
        start_controller_manager: false,
        ..EnvOptions::default()
    };
    if options.api_surface != flotilla_tests::ApiSurface::Current {
        // FLOTILLA_API_SURFACE=legacy chose v1.20's own surface for this run.
        return Ok(());
    }
    let env = LocalEnv::start(options).await?;
    let client = env.host().client().await?;
    let groups = client.list_api_groups().await?;
    let served: Vec<String> = groups
        .groups
        .iter()
        .flat_map(|g| g.versions.iter().map(|v| v.group_version.clone()))
        .collect();
    for gone in flotilla_localenv::api_surface::REMOVED_BETAS {
        anyhow::ensure!(
            !served.iter().any(|gv| gv == gone),
            "{gone} is still served"
        );
    }
    for kept in [
        "rbac.authorization.k8s.io/v1",
        "networking.k8s.io/v1",
        "apiextensions.k8s.io/v1",
        "coordination.k8s.io/v1",
        "discovery.k8s.io/v1beta1",
    ] {
        anyhow::ensure!(
            served.iter().any(|gv| gv == kept),
            "{kept} is not served: {served:?}"
        );
    }
    env.shutdown().await?;
    Ok(())
}

/// The program name and environment of a running process.
fn process_of(pid: u32) -> (String, String) {
    let read = |f: &str| {
        std::fs::read(format!("/proc/{pid}/{f}"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    };
    (read("cmdline"), read("environ"))
}

#[tokio::test]
async fn lean_members_started_in_batches_serve_and_issue_tokens_with_fewer_controllers()
-> anyhow::Result<()> {
    init_tracing();
    let options = EnvOptions {
        members: 3,
        lean_members: true,
        start_batch: Some(2),
        ..EnvOptions::default()
    };
    let env = LocalEnv::start(options).await?;
    let processes: Vec<(String, String)> = env.pids().into_iter().map(process_of).collect();
    let gogc = format!("GOGC={}", flotilla_localenv::LEAN_GOGC);
    let mut lean_seen = 0;
    for (cmd, environ) in &processes {
        let host = cmd.contains("--etcd-prefix=/host ") || cmd.contains("/host/");
        if cmd.contains("kube-apiserver") {
            assert_eq!(environ.split(' ').any(|var| var == gogc), !host, "{cmd}");
            assert_eq!(
                cmd.contains("--enable-priority-and-fairness=false"),
                !host,
                "{cmd}"
            );
            lean_seen += usize::from(!host);
        } else if cmd.contains("kube-controller-manager") {
            // The host runs every controller; a lean member only the service-account ones.
            assert_eq!(cmd.contains("--controllers=* "), host, "{cmd}");
        }
    }
    assert_eq!(lean_seen, 3, "{processes:?}");
    // Every member serves, stores objects of its own and issues service-account tokens
    // (what `flotilla join` waits for) — the environment's start waited for them.
    for member in env.members() {
        let client = member.client().await?;
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        api.create(
            &PostParams::default(),
            &config_map("lean", "default", member.name()),
        )
        .await?;
        let got = api.get("lean").await?;
        assert_eq!(
            got.data
                .unwrap_or_default()
                .get("value")
                .map(String::as_str),
            Some(member.name())
        );
    }
    env.shutdown().await?;
    Ok(())
}

/// The tests' CRD of `Widget`s (group `demo.flotilla.io`).
fn widget_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.demo.flotilla.io" },
        "spec": {
            "group": "demo.flotilla.io",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"],
            },
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {
                            "size": { "type": "integer" },
                            "color": { "type": "string" },
                        },
                    }},
                }},
            }],
        },
    }))?)
}

/// Waits until the `Widget` CRD is Established.
async fn wait_established(crds: &Api<CustomResourceDefinition>) -> anyhow::Result<()> {
    wait_for(
        Duration::from_secs(30),
        "the CRD to be Established",
        || async {
            let crd = crds.get("widgets.demo.flotilla.io").await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            anyhow::ensure!(established, "not established yet");
            Ok(())
        },
    )
    .await
}

/// A host seed saved from one environment is in the next host's storage before anything is
/// installed there: its CRD served, Established, and its custom resources accepted.
#[tokio::test]
async fn a_saved_host_seed_is_in_the_next_hosts_storage_before_anything_is_installed()
-> anyhow::Result<()> {
    let seed = HostSeed {
        name: format!("foundation-test-{}", std::process::id()),
        prefixes: vec!["apiextensions.k8s.io/customresourcedefinitions/".into()],
    };
    let options = || EnvOptions::with_members(0).seeded_with(seed.clone());
    let first = env_with(options()).await;
    assert!(!first.host_seed_restored(), "no seed saved yet");
    let crds: Api<CustomResourceDefinition> = Api::all(first.host().client().await?);
    crds.create(&PostParams::default(), &widget_crd()?).await?;
    wait_established(&crds).await?;
    assert!(first.save_host_seed().await?, "saved");
    assert!(!first.save_host_seed().await?, "saved once");
    first.shutdown().await?;

    let second = env_with(options()).await;
    let restored = second.host_seed_restored();
    let client = second.host().client().await?;
    let checked = async {
        anyhow::ensure!(restored, "the saved seed was not restored");
        wait_established(&Api::all(client.clone())).await?;
        let gvk = GroupVersionKind::gvk("demo.flotilla.io", "v1alpha1", "Widget");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
        let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
        let widget = DynamicObject::new("seeded", &resource)
            .within("default")
            .data(json!({ "spec": { "size": 2 } }));
        wait_for(Duration::from_secs(10), "a seeded Widget", || async {
            Ok(widgets.create(&PostParams::default(), &widget).await?)
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    std::fs::remove_file(seed.path()?)?;
    checked
}
