//! `crdcompat`: checks that the CRDs the code generates are compatible with the snapshot of
//! the last released CRDs in `config/crds-compat/` (no dropped field, narrowed type,
//! removed enum value, newly required field, removed or unserved version, storage version
//! moved without a conversion path — see `flotilla_api::compat`). With `--refresh`, after
//! the same check passes, rewrites the snapshot from the generated CRDs, so a compatible
//! change that landed is protected from then on.
//!
//! ```text
//! cargo run -p flotilla-api --bin crdcompat [-- --refresh] [-- --root <repo>]
//! ```
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use flotilla_api::{compat, crdgen};
use serde_json::Value;

/// The snapshot of the last released CRDs, relative to the repository root.
const SNAPSHOT_DIR: &str = "config/crds-compat";

struct Args {
    refresh: bool,
    root: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        refresh: false,
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--refresh" => args.refresh = true,
            "--root" => args.root = it.next().context("--root needs a directory")?.into(),
            "-h" | "--help" => {
                println!(
                    "usage: crdcompat [--refresh] [--root <repository root>]\n\n\
                     Compares the generated CRDs with {SNAPSHOT_DIR}/ and lists every breaking \
                     change (exit 1); with --refresh, rewrites the snapshot when compatible."
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

/// Every CRD of the snapshot, as JSON values.
fn snapshot(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let mut crds = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let crd: Value =
            serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let named = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some();
        if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") || !named {
            bail!("{} is not a named CustomResourceDefinition", path.display());
        }
        crds.push(crd);
    }
    if crds.is_empty() {
        bail!("no CRDs in {}", dir.display());
    }
    Ok(crds)
}

/// A generated CRD: its file name, YAML as `crdgen` writes it, and value.
struct Generated {
    file: String,
    yaml: String,
    value: Value,
}

/// The CRDs the code generates (host and member), each once, as `crdgen` renders them.
fn generated() -> anyhow::Result<Vec<Generated>> {
    let mut out: Vec<Generated> = Vec::new();
    for file in crdgen::generated_files()? {
        let in_crd_dir = crdgen::crd_dirs()
            .iter()
            .any(|d| file.path.starts_with(&format!("{d}/")));
        let name = file.path.rsplit('/').next().unwrap_or_default().to_string();
        if !in_crd_dir || name == crdgen::KUSTOMIZATION_FILE || out.iter().any(|g| g.file == name) {
            continue;
        }
        let value: Value = serde_saphyr::from_str(&file.contents)
            .with_context(|| format!("parsing generated {}", file.path))?;
        out.push(Generated {
            file: name,
            yaml: file.contents,
            value,
        });
    }
    Ok(out)
}

fn refresh(dir: &Path, current: &[Generated]) -> anyhow::Result<()> {
    if dir.exists() {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
    }
    std::fs::create_dir_all(dir)?;
    for g in current {
        std::fs::write(dir.join(&g.file), &g.yaml)
            .with_context(|| format!("writing {}", g.file))?;
    }
    println!("{} CRDs written to {SNAPSHOT_DIR}/", current.len());
    Ok(())
}

fn main() -> anyhow::Result<ExitCode> {
    let args = parse_args()?;
    let dir = args.root.join(SNAPSHOT_DIR);
    let current = generated()?;
    let values: Vec<Value> = current.iter().map(|g| g.value.clone()).collect();
    let breaks = compat::compare_sets(&snapshot(&dir)?, &values);
    if !breaks.is_empty() {
        eprintln!("the generated CRDs break compatibility with {SNAPSHOT_DIR}/:");
        for b in &breaks {
            eprintln!("  {b}");
        }
        eprintln!(
            "keep the old shape, or serve the change as a new API version with a conversion \
             path (docs/development.md, \"CRD compatibility\")"
        );
        return Ok(ExitCode::FAILURE);
    }
    if args.refresh {
        refresh(&dir, &current)?;
    } else {
        println!("{} CRDs are compatible with {SNAPSHOT_DIR}/", current.len());
    }
    Ok(ExitCode::SUCCESS)
}
