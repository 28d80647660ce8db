//! Fuzzes override paths: any string is converted to a JSON pointer or rejected, a dotted
//! path always converts to a pointer that parses, and an override that fails leaves the
//! object as it was. A panic or a failed assertion is a finding.
#![no_main]

use flotilla_api::federated::{ClusterOverride, OverrideOp};
use flotilla_core::override_path::to_pointer;
use flotilla_core::overrides::apply;
use json_patch::jsonptr::PointerBuf;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pointer) = to_pointer(path)
        && !path.starts_with('/')
    {
        assert!(
            PointerBuf::parse(&pointer).is_ok(),
            "{path:?} converted to {pointer:?}, which is not a JSON pointer"
        );
    }
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "a"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"image": "x"}]}}},
    });
    for op in [OverrideOp::Add, OverrideOp::Remove, OverrideOp::Replace] {
        let ops = [ClusterOverride {
            op: Some(op),
            path: path.to_owned(),
            value: Some(json!(3)),
        }];
        let mut patched = object.clone();
        if apply(&mut patched, "member1", &ops).is_err() {
            assert_eq!(patched, object, "a failed override changed the object");
        }
    }
});
