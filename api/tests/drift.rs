//! The YAML committed under `config/crds/`, `config/default-types/` and the opt-in APIs'
//! component directories is what the code generates: fails with the list of drifted files and the command that fixes them.

use std::collections::BTreeSet;
use std::path::Path;

use flotilla_api::crdgen;

#[test]
fn committed_crds_and_type_configs_match_the_generated_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = crdgen::generated_files().expect("the CRDs render");
    let mut drifted = Vec::new();
    for file in &files {
        match std::fs::read_to_string(root.join(&file.path)) {
            Ok(committed) if crdgen::same_content(&committed, &file.contents) => {}
            Ok(_) => drifted.push(format!("{} differs", file.path)),
            Err(_) => drifted.push(format!("{} is missing", file.path)),
        }
    }
    let wanted: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for dir in crdgen::generated_dirs() {
        for entry in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if path.ends_with(".yaml") && !wanted.contains(path.as_str()) {
                drifted.push(format!("{path} is no longer generated"));
            }
        }
    }
    assert!(
        drifted.is_empty(),
        "generated YAML drifted from the code; run `cargo run -p flotilla-api --bin crdgen` \
         and commit the result:\n  {}",
        drifted.join("\n  ")
    );
}
