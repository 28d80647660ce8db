//! The writes of one pass: a member's (or the host's) [`Op`]s, and the conditions of the
//! exports. Each write is attempted once per pass; a failure is returned (and logged) so
//! the export's Ready condition can say so, and the next pass tries again. No decisions.

use flotilla_api::{
    FIELD_MANAGER,
    mcs::{IMPORT_MANAGED_BY_LABEL, MANAGED_BY, ServiceExport, ServiceImport},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use serde_json::json;
use tracing::{debug, warn};

use super::{objects::Op, plan::ServiceKey, slice::SliceVersion};

/// A write that failed, for the export's Ready condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The cluster written to (`host` for the host's mirror).
    pub cluster: String,
    /// The service the write was for, when one.
    pub key: Option<ServiceKey>,
    /// What failed.
    pub error: String,
}

/// Label set of `flotilla_mcs_writes_total`: which write ([`Op::as_str`], or
/// `export_status`) and how it ended (`success`, `failure`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// The write.
    pub op: &'static str,
    /// `success` or `failure`.
    pub result: &'static str,
}

/// `flotilla_mcs_writes_total{op,result}`.
pub type Writes = Family<WriteLabels, Counter>;

pub(super) fn count(writes: &Writes, op: &'static str, ok: bool) {
    let result = if ok { "success" } else { "failure" };
    writes.get_or_create(&WriteLabels { op, result }).inc();
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Deleting something already gone is no failure.
fn gone_is_fine(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other,
    }
}

/// A ServiceImport of this name that Flotilla did not write (no managed-by label) belongs
/// to someone else: it is never overwritten.
async fn ensure_ours(api: &Api<ServiceImport>, key: &ServiceKey) -> Result<(), String> {
    let existing = api
        .get_metadata_opt(&key.name)
        .await
        .map_err(|e| e.to_string())?;
    match existing {
        Some(meta)
            if meta
                .labels()
                .get(IMPORT_MANAGED_BY_LABEL)
                .map(String::as_str)
                != Some(MANAGED_BY) =>
        {
            Err(format!(
                "a ServiceImport {key} not managed by Flotilla (no label {IMPORT_MANAGED_BY_LABEL}={MANAGED_BY}) is in the way; it is left alone"
            ))
        }
        _ => Ok(()),
    }
}

async fn execute_one(
    client: &Client,
    version: Option<SliceVersion>,
    op: &Op,
) -> Result<(), String> {
    let imports = |ns: &str| Api::<ServiceImport>::namespaced(client.clone(), ns);
    let slices = |ns: &str| {
        // Slice ops exist only for targets with a version (members, not the host).
        let ar = version.unwrap_or(SliceVersion::V1).api_resource();
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
    };
    let done = match op {
        Op::ApplyImport { key, body } => {
            let api = imports(&key.namespace);
            ensure_ours(&api, key).await?;
            api.patch(&key.name, &apply_params(), &Patch::Apply(body))
                .await
                .map(drop)
        }
        Op::ImportStatus { key, body } => {
            let api = imports(&key.namespace);
            ensure_ours(&api, key).await?;
            api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .map(drop)
        }
        Op::DeleteImport { key } => gone_is_fine(
            imports(&key.namespace)
                .delete(&key.name, &DeleteParams::default())
                .await
                .map(drop),
        ),
        Op::ApplySlice { key, name, body } => slices(&key.namespace)
            .patch(name, &apply_params(), &Patch::Apply(body))
            .await
            .map(drop),
        Op::DeleteSlice { namespace, name } => gone_is_fine(
            slices(namespace)
                .delete(name, &DeleteParams::default())
                .await
                .map(drop),
        ),
    };
    done.map_err(|e| e.to_string())
}

fn describe(op: &Op) -> String {
    match op {
        Op::ApplyImport { key, .. } => format!("applying ServiceImport {key}"),
        Op::ImportStatus { key, .. } => format!("writing the status of ServiceImport {key}"),
        Op::DeleteImport { key } => format!("deleting ServiceImport {key}"),
        Op::ApplySlice { key, name, .. } => {
            format!("applying EndpointSlice {}/{name}", key.namespace)
        }
        Op::DeleteSlice { namespace, name } => {
            format!("deleting EndpointSlice {namespace}/{name}")
        }
    }
}

/// Runs `ops` against one cluster, in order; returns the failures.
pub async fn execute(
    cluster: &str,
    client: &Client,
    version: Option<SliceVersion>,
    ops: &[Op],
    writes: &Writes,
) -> Vec<Failure> {
    let mut failures = Vec::new();
    for op in ops {
        let what = describe(op);
        let done = execute_one(client, version, op).await;
        count(writes, op.as_str(), done.is_ok());
        match done {
            Ok(()) => debug!(%cluster, "{what}"),
            Err(e) => {
                warn!(%cluster, error = %e, "{what} failed");
                failures.push(Failure {
                    cluster: cluster.to_string(),
                    key: op.service().cloned(),
                    error: format!("{what} in {cluster}: {e}"),
                });
            }
        }
    }
    failures
}

/// Writes an export's conditions (a merge patch of its status); returns whether it worked.
pub async fn write_export_status(
    cluster: &str,
    client: &Client,
    key: &ServiceKey,
    conditions: &[Condition],
    writes: &Writes,
) -> bool {
    // Dynamic: the response is an export, usually without `spec`, which the typed struct
    // cannot read.
    let ar = ApiResource::erase::<ServiceExport>(&());
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &key.namespace, &ar);
    let body = json!({"status": {"conditions": conditions}});
    let done = api
        .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&body))
        .await;
    count(writes, "export_status", done.is_ok());
    match done {
        Ok(_) => {
            debug!(%cluster, %key, "export conditions written");
            true
        }
        Err(e) => {
            warn!(%cluster, %key, error = %e, "writing the export's conditions failed");
            false
        }
    }
}
