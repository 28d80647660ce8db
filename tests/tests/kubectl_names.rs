//! kubectl's names after the documented install (issue 56). `kubectl apply --server-side -k
//! config/` installs no two CRDs that answer to one kubectl name, so `kubectl get` and
//! `kubectl delete` by plural, singular, kind or short name act on the v1beta1
//! Federated&lt;Kind&gt; objects and on Flotilla's ServiceAccountImports — before the fix,
//! kubefed's alpha CRDs and Admiralty's import CRD took those plurals and kubectl read the
//! other groups. The opt-in APIs, installed as the docs say (the kustomize components in an
//! overlay of `config/`, or `flotilla enable --kubefed-alpha --admiralty-imports`), are
//! addressed fully qualified, leave the short names to v1beta1 and Flotilla, and are served
//! by a running control plane without a restart.
//!
//! The check that no two CRDs of `config/kustomization.yaml` share a name reads the files
//! and needs no cluster.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    ServiceAccountImport, TYPES_GROUP,
    admiralty::{AnyImport, ImportGroup},
    crdgen::{self, KUSTOMIZATION_FILE, OptionalApi},
    kubectl_names::{NameRole, kubectl_names, name_clashes},
    multicluster::MULTICLUSTER_GROUP,
};
use flotilla_tests::{
    EnvOptions, LocalEnv, cli::run_ok, env_with, federation::federated_namespace,
    member::config_maps, objects::create_namespace, wait::wait_present, wait_for,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Resource as _,
    api::{DynamicObject, PostParams},
    core::ApiResource,
};
use serde_json::{Value, json};

const KUBECTL: &str = "/usr/bin/kubectl";
/// CRDs become Established within seconds; discovery catches up soon after.
const T: Duration = Duration::from_secs(60);
/// The namespace of the objects looked up by name.
const NS: &str = "names";

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config")
}

// ---- the kustomization's CRDs, read from the files ----------------------------------------

/// Every CRD a kustomization (or component) in `dir` installs: its `resources` (files, and
/// directories read the same way) and its `components`.
fn kustomization_crds(dir: &Path) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let path = dir.join(KUSTOMIZATION_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let k: Value = serde_saphyr::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let mut crds = Vec::new();
    for key in ["resources", "components"] {
        for entry in k[key].as_array().into_iter().flatten() {
            let entry = dir.join(entry.as_str().context("a path")?);
            if entry.is_dir() {
                crds.extend(kustomization_crds(&entry)?);
                continue;
            }
            let text =
                std::fs::read_to_string(&entry).with_context(|| format!("{}", entry.display()))?;
            for doc in serde_saphyr::from_multiple::<Value>(&text)
                .with_context(|| format!("{}", entry.display()))?
            {
                if doc["kind"] == "CustomResourceDefinition" {
                    crds.push(serde_json::from_value(doc)?);
                }
            }
        }
    }
    Ok(crds)
}

fn names_of(crds: &[CustomResourceDefinition]) -> BTreeSet<String> {
    crds.iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

#[test]
fn no_two_crds_of_the_default_kustomization_answer_to_one_kubectl_name() {
    let crds = kustomization_crds(&config_dir()).expect("config/ reads");
    let clashes: Vec<String> = name_clashes(&crds).iter().map(|c| c.to_string()).collect();
    assert!(
        clashes.is_empty(),
        "config/kustomization.yaml installs CRDs kubectl cannot tell apart; make one of each pair \
         opt-in (crdgen's OptionalApi):\n  {}",
        clashes.join("\n  ")
    );
    // What it installs is what the code calls the default install.
    assert_eq!(names_of(&crds), names_of(&crdgen::default_crds()));
}

#[test]
fn each_opt_in_component_holds_crds_that_would_shadow_a_default_name() {
    let default = kustomization_crds(&config_dir()).expect("config/ reads");
    for api in OptionalApi::ALL {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(api.dir());
        let component = kustomization_crds(&dir).expect("the component reads");
        assert_eq!(names_of(&component), names_of(&api.crds()), "{api:?}");
        let mut both = default.clone();
        both.extend(component);
        assert!(
            !name_clashes(&both).is_empty(),
            "{api:?}: why is it opt-in?"
        );
    }
}

// ---- kubectl -----------------------------------------------------------------------------

/// Runs kubectl against the host with its own discovery cache; (success, stdout, stderr).
async fn kubectl(env: &LocalEnv, args: &[&str]) -> anyhow::Result<(bool, String, String)> {
    let out = tokio::process::Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["--context", "host", "--cache-dir"])
        .arg(env.dir().join("kubectl-cache"))
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {KUBECTL} (scripts/install-k8s.sh installs one)"))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Runs kubectl until it succeeds (discovery may lag a CRD that was just established).
async fn kubectl_ok(env: &LocalEnv, args: &[&str]) -> anyhow::Result<String> {
    wait_for(T, &format!("kubectl {}", args.join(" ")), || async {
        let (ok, stdout, stderr) = kubectl(env, args).await?;
        ensure!(ok, "{stdout}{stderr}");
        Ok(stdout)
    })
    .await
}

/// `apiVersion kind name` of every object `kubectl get WHAT -n NS` lists.
async fn listed(env: &LocalEnv, what: &str) -> anyhow::Result<BTreeSet<String>> {
    let template = r#"{range .items[*]}{.apiVersion} {.kind} {.metadata.name}{"\n"}{end}"#;
    let out = kubectl_ok(
        env,
        &["get", what, "-n", NS, "-o", &format!("jsonpath={template}")],
    )
    .await?;
    Ok(out.lines().map(str::to_owned).collect())
}

// ---- the probes: one kind per CRD that shares a name with an opt-in one ------------------

/// A resource whose names an opt-in API also claims, and the objects created to find it.
struct Probe {
    crd: CustomResourceDefinition,
    api: ApiResource,
}

impl Probe {
    /// The v1beta1 Federated&lt;Kind&gt; of every default type, and Flotilla's import.
    fn all() -> Vec<Probe> {
        crdgen::default_crds()
            .into_iter()
            .filter(|c| {
                c.spec.group == TYPES_GROUP
                    || (c.spec.group == MULTICLUSTER_GROUP
                        && c.spec.names.kind == ServiceAccountImport::kind(&()))
            })
            .map(|crd| {
                let version = &crd.spec.versions[0].name;
                let gvk = kube::core::GroupVersionKind::gvk(
                    &crd.spec.group,
                    version,
                    &crd.spec.names.kind,
                );
                let api = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
                Probe { crd, api }
            })
            .collect()
    }

    fn namespaced(&self) -> bool {
        self.crd.spec.scope == "Namespaced"
    }

    fn dynamic(&self, client: &Client) -> Api<DynamicObject> {
        match self.namespaced() {
            true => Api::namespaced_with(client.clone(), NS, &self.api),
            false => Api::all_with(client.clone(), &self.api),
        }
    }

    /// The object `name`, labelled `app=<name>`.
    fn object(&self, name: &str) -> Value {
        let spec = if self.api.group == TYPES_GROUP {
            json!({"template": {}, "placement": {"clusters": []}})
        } else {
            json!({"clusterName": "member1", "namespace": "default", "name": "default"})
        };
        let mut meta = json!({"name": name, "labels": {"app": name}});
        if self.namespaced() {
            meta["namespace"] = json!(NS);
        }
        json!({"apiVersion": self.api.api_version, "kind": self.api.kind, "metadata": meta, "spec": spec})
    }

    /// How kubectl lists `name` of this kind.
    fn line(&self, name: &str) -> String {
        format!("{} {} {name}", self.api.api_version, self.api.kind)
    }

    /// Its names in `role` (the kind as written, CamelCase).
    fn names(&self, role: NameRole) -> Vec<String> {
        if role == NameRole::Kind {
            return vec![self.crd.spec.names.kind.clone()];
        }
        kubectl_names(&self.crd)
            .into_iter()
            .filter(|n| n.role == role)
            .map(|n| n.name)
            .collect()
    }
}

async fn wait_established(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names_of(crds) {
        wait_for(T, &format!("CRD {name} Established"), || async {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            ensure!(established, "not yet");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// `kubectl get` by every name of every probe lists exactly the objects `expected` names,
/// each in the probe's own group.
async fn every_name_lists(
    env: &LocalEnv,
    probes: &[Probe],
    expected: &[&str],
) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    for role in [
        NameRole::Plural,
        NameRole::Singular,
        NameRole::Kind,
        NameRole::ShortName,
    ] {
        for probe in probes {
            let want: BTreeSet<String> = expected.iter().map(|n| probe.line(n)).collect();
            for name in probe.names(role) {
                let got = listed(env, &name).await?;
                if got != want {
                    wrong.push(format!(
                        "`kubectl get {name} -n {NS}` ({} of {}) listed {got:?}, not {want:?}",
                        role.as_str(),
                        probe.api.api_version
                    ));
                }
            }
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

/// The host after `kubectl apply --server-side -k config/` (docs/operations.md, "Install").
async fn documented_install() -> anyhow::Result<(LocalEnv, Client)> {
    let env = env_with(EnvOptions {
        members: 0,
        start_controller_manager: false,
        ..EnvOptions::default()
    })
    .await;
    let client = env.host().client().await?;
    let config = config_dir();
    kubectl_ok(
        &env,
        &["apply", "--server-side", "-k", &config.to_string_lossy()],
    )
    .await
    .context("the documented install (kubectl ≥ 1.21: its kustomize reads directories)")?;
    wait_established(&client, &crdgen::default_crds()).await?;
    Ok((env, client))
}

#[tokio::test]
async fn after_the_documented_install_kubectls_names_reach_v1beta1_and_flotillas_imports()
-> anyhow::Result<()> {
    let (env, client) = documented_install().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for api in OptionalApi::ALL {
        for name in names_of(&api.crds()) {
            ensure!(crds.get_opt(&name).await?.is_none(), "{name} is installed");
        }
    }
    create_namespace(&client, NS).await?;
    let probes = Probe::all();
    ensure!(probes.len() == crdgen::default_target_types().len() + 1);
    for probe in &probes {
        for name in ["web", "other"] {
            let obj: DynamicObject = serde_json::from_value(probe.object(name))?;
            probe
                .dynamic(&client)
                .create(&PostParams::default(), &obj)
                .await?;
        }
    }

    every_name_lists(&env, &probes, &["other", "web"]).await?;
    for probe in &probes {
        for name in probe.names(NameRole::Singular) {
            let got = kubectl_ok(
                &env,
                &[
                    "get",
                    &name,
                    "web",
                    "-n",
                    NS,
                    "-o",
                    "jsonpath={.apiVersion}",
                ],
            )
            .await?;
            ensure!(
                got == probe.api.api_version,
                "kubectl get {name} web: {got}"
            );
        }
    }

    // One delete by plural and label acts on every probe's own objects.
    let plurals: Vec<String> = probes
        .iter()
        .flat_map(|p| p.names(NameRole::Plural))
        .collect();
    kubectl_ok(
        &env,
        &["delete", &plurals.join(","), "-l", "app=web", "-n", NS],
    )
    .await?;
    for probe in &probes {
        let api = probe.dynamic(&client);
        ensure!(
            api.get_opt("web").await?.is_none(),
            "{} web kept",
            probe.api.kind
        );
        ensure!(
            api.get_opt("other").await?.is_some(),
            "{} other gone",
            probe.api.kind
        );
    }
    every_name_lists(&env, &probes, &["other"]).await?;

    opt_in_components_are_addressed_fully_qualified(&env, &client, &probes).await?;
    env.shutdown().await?;
    Ok(())
}

/// A path from `from` (absolute) to `to` (absolute), through the root: kustomize takes only
/// relative paths to other kustomizations.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let ups = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut path: PathBuf = std::iter::repeat_n("..", ups).collect();
    path.push(to.strip_prefix("/").unwrap_or(to));
    path
}

/// The components, as docs/api.md shows them: an overlay of `config/` listing both. Each
/// opt-in resource then answers to its qualified name, the short names stay the default
/// install's, and the default objects are still found by their qualified names.
async fn opt_in_components_are_addressed_fully_qualified(
    env: &LocalEnv,
    client: &Client,
    probes: &[Probe],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(env.dir().join("overlay"))?;
    let overlay = env.dir().join("overlay").canonicalize()?;
    let config = config_dir().canonicalize()?;
    let mut kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- {}\ncomponents:\n",
        relative(&overlay, &config).display()
    );
    for api in OptionalApi::ALL {
        let dir = config.join("..").join(api.dir()).canonicalize()?;
        kustomization.push_str(&format!("- {}\n", relative(&overlay, &dir).display()));
    }
    std::fs::write(overlay.join(KUSTOMIZATION_FILE), kustomization)?;
    kubectl_ok(
        env,
        &["apply", "--server-side", "-k", &overlay.to_string_lossy()],
    )
    .await?;
    let optional: Vec<CustomResourceDefinition> = OptionalApi::ALL
        .into_iter()
        .flat_map(OptionalApi::crds)
        .collect();
    wait_established(client, &optional).await?;

    for probe in probes {
        let plural = &probe.crd.spec.names.plural;
        let qualified = format!("{plural}.{}", probe.api.group);
        ensure!(listed(env, &qualified).await? == BTreeSet::from([probe.line("other")]));
        for short in probe.names(NameRole::ShortName) {
            ensure!(
                listed(env, &short).await? == BTreeSet::from([probe.line("other")]),
                "the short name {short} left {qualified}"
            );
        }
        let twin = optional
            .iter()
            .find(|c| &c.spec.names.plural == plural)
            .with_context(|| format!("an opt-in twin of {qualified}"))?;
        let twin_name = format!("{plural}.{}", twin.spec.group);
        ensure!(
            listed(env, &twin_name).await?.is_empty(),
            "{twin_name} lists objects"
        );
    }
    // Admiralty's own short name reaches Admiralty's group.
    let admiralty = ImportGroup::Admiralty.api_resource();
    let imports: Api<AnyImport> = Api::namespaced_with(client.clone(), NS, &admiralty);
    let import: AnyImport = serde_json::from_value(json!({
        "apiVersion": admiralty.api_version, "kind": admiralty.kind,
        "metadata": {"name": "admiralty", "namespace": NS},
        "spec": {"clusterName": "member1", "namespace": "default", "name": "default"}
    }))?;
    imports.create(&PostParams::default(), &import).await?;
    ensure!(
        listed(env, "sai").await?
            == BTreeSet::from([format!(
                "{} ServiceAccountImport admiralty",
                admiralty.api_version
            )])
    );
    Ok(())
}

// ---- the opt-in APIs on a running federation ---------------------------------------------

const FED_NS: &str = "names-optin";

#[tokio::test]
async fn opt_in_apis_enabled_on_a_running_federation_are_served_without_a_restart()
-> anyhow::Result<()> {
    let fed = flotilla_tests::federation::federation(1).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(fed.host.clone());
    let optional: Vec<CustomResourceDefinition> = OptionalApi::ALL
        .into_iter()
        .flat_map(OptionalApi::crds)
        .collect();
    for name in names_of(&optional) {
        ensure!(
            crds.get_opt(&name).await?.is_none(),
            "{name} installed by the bootstrap"
        );
    }

    let out = run_ok(&fed, &["enable", "--kubefed-alpha", "--admiralty-imports"]).await?;
    for name in names_of(&optional) {
        ensure!(
            out.contains(&format!("customresourcedefinition {name} applied")),
            "{out}"
        );
    }
    ensure!(
        out.contains("PLURAL.types.kubefed.io") && out.contains("saimport"),
        "{out}"
    );

    // kubefed's alpha sample style: an alpha object in a v1beta1-federated namespace.
    federated_namespace(&fed, FED_NS).await?;
    let alpha_cm = ApiResource {
        group: flotilla_api::alpha::ALPHA_TYPES_GROUP.into(),
        version: flotilla_api::alpha::V1ALPHA1.into(),
        api_version: format!(
            "{}/{}",
            flotilla_api::alpha::ALPHA_TYPES_GROUP,
            flotilla_api::alpha::V1ALPHA1
        ),
        kind: "FederatedConfigMap".into(),
        plural: "federatedconfigmaps".into(),
    };
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": alpha_cm.api_version, "kind": alpha_cm.kind,
        "metadata": {"name": "from-alpha", "namespace": FED_NS},
        "spec": {"template": {"data": {"api": "alpha"}}, "placement": {"clusters": [{"name": "member1"}]}}
    }))?;
    Api::<DynamicObject>::namespaced_with(fed.host.clone(), FED_NS, &alpha_cm)
        .create(&PostParams::default(), &obj)
        .await?;
    // The alpha CRD is looked for every 30 s by the type's controller.
    wait_present(
        Duration::from_secs(90),
        &config_maps(&fed.members[0], FED_NS),
        "from-alpha",
    )
    .await?;

    // Admiralty's import, answered by the import controller whose watch found the new CRD.
    Api::<ServiceAccount>::namespaced(fed.members[0].clone(), FED_NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "reader"}}))?,
        )
        .await?;
    let admiralty = ImportGroup::Admiralty.api_resource();
    let imports: Api<AnyImport> = Api::namespaced_with(fed.host.clone(), FED_NS, &admiralty);
    let import: AnyImport = serde_json::from_value(json!({
        "apiVersion": admiralty.api_version, "kind": admiralty.kind,
        "metadata": {"name": "reader-member1", "namespace": FED_NS},
        "spec": {"clusterName": "member1", "namespace": FED_NS, "name": "reader"}
    }))?;
    imports.create(&PostParams::default(), &import).await?;
    wait_for(T, "Admiralty's import Ready", || async {
        let i = imports.get("reader-member1").await?;
        let reason = i
            .status
            .as_ref()
            .and_then(|s| s.ready())
            .and_then(|c| c.reason.clone());
        ensure!(reason.as_deref() == Some("TokenIssued"), "{reason:?}");
        Ok(())
    })
    .await?;
    Ok(())
}
