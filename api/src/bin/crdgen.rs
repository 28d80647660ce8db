//! `crdgen`: writes the generated CRDs to `config/crds/` (and the opt-in APIs' kustomize
//! components to their directories, `config/kubefed-alpha/` and `config/admiralty/`) and the
//! default FederatedTypeConfigs to `config/default-types/`; with `--check`, writes nothing
//! and exits non-zero listing every file that differs from what the code generates.
//!
//! ```text
//! cargo run -p flotilla-api --bin crdgen [-- --check] [-- --root <repo>]
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use flotilla_api::crdgen::{self, CRDS_DIR, DEFAULT_TYPES_DIR, GeneratedFile};

struct Args {
    check: bool,
    root: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        check: false,
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--check" => args.check = true,
            "--root" => {
                args.root = it.next().context("--root needs a directory")?.into();
            }
            "-h" | "--help" => {
                println!(
                    "usage: crdgen [--check] [--root <repository root>]\n\n\
                     Writes {CRDS_DIR}/*.yaml, the opt-in APIs' components and \
                     {DEFAULT_TYPES_DIR}/*.yaml; with --check, \
                     lists the files that differ and exits 1."
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

/// YAML files in the generated directories that the code no longer generates.
fn stale_files(root: &Path, files: &[GeneratedFile]) -> anyhow::Result<Vec<String>> {
    let wanted: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut stale = Vec::new();
    for dir in crdgen::generated_dirs() {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let path = format!("{dir}/{name}");
            if name.ends_with(".yaml") && !wanted.contains(path.as_str()) {
                stale.push(path);
            }
        }
    }
    stale.sort();
    Ok(stale)
}

fn check(root: &Path, files: &[GeneratedFile]) -> anyhow::Result<ExitCode> {
    let mut drifted = Vec::new();
    for file in files {
        match std::fs::read_to_string(root.join(&file.path)) {
            Ok(committed) if crdgen::same_content(&committed, &file.contents) => {}
            Ok(_) => drifted.push(format!("{} (differs)", file.path)),
            Err(_) => drifted.push(format!("{} (missing)", file.path)),
        }
    }
    drifted.extend(
        stale_files(root, files)?
            .into_iter()
            .map(|p| format!("{p} (no longer generated)")),
    );
    if drifted.is_empty() {
        println!("{} generated files are up to date", files.len());
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("generated files drifted from the code:");
    for d in &drifted {
        eprintln!("  {d}");
    }
    eprintln!("run `cargo run -p flotilla-api --bin crdgen` and commit the result");
    Ok(ExitCode::FAILURE)
}

fn write(root: &Path, files: &[GeneratedFile]) -> anyhow::Result<ExitCode> {
    for stale in stale_files(root, files)? {
        std::fs::remove_file(root.join(&stale)).with_context(|| format!("removing {stale}"))?;
        println!("removed {stale}");
    }
    for file in files {
        let path = root.join(&file.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if std::fs::read_to_string(&path).ok().as_deref() == Some(file.contents.as_str()) {
            continue;
        }
        std::fs::write(&path, &file.contents).with_context(|| format!("writing {}", file.path))?;
        println!("wrote {}", file.path);
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> anyhow::Result<ExitCode> {
    let args = parse_args()?;
    let files = crdgen::generated_files()?;
    if args.check {
        check(&args.root, &files)
    } else {
        write(&args.root, &files)
    }
}
