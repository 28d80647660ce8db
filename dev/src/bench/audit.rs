//! Requests as the API servers' own audit logs record them: every request of every client,
//! watches and lists included, with the user who sent it and when it arrived. The
//! benchmark turns the log on (written to the apiserver's output, so each cluster's goes
//! to its own log file) and reads it back once the run is over. Parsing and counting are
//! pure; only [`write_policy`] and [`read_log`] touch files.

use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// Every request at `Metadata` level (who, what, when), except writes of a KubeFedCluster's
/// status, logged with their body so that a resource-summary write can be told from a
/// health-check write. `RequestReceived` is left out: a request is logged once when it
/// completes, a watch also when it starts.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["patch", "update"]
  resources:
  - group: core.kubefed.io
    resources: ["kubefedclusters/status"]
- level: Metadata
"#;

/// Writes the audit policy into `dir` and returns the apiserver flags that use it.
pub(super) fn write_policy(dir: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("audit-policy.yaml");
    std::fs::write(&path, POLICY).with_context(|| format!("writing {}", path.display()))?;
    Ok(vec![
        format!("--audit-policy-file={}", path.display()),
        // The apiserver's output, which localenv keeps in the cluster's own log file.
        "--audit-log-path=-".to_owned(),
    ])
}

/// The log file an apiserver of a local cluster writes (its output and its audit log).
pub(super) fn log_of(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("apiserver.log")
}

/// The audited requests in an apiserver's log whose line `keep` accepts (a cheap filter
/// before parsing: a user name, a resource).
pub(super) fn read_log(path: &Path, keep: impl Fn(&str) -> bool) -> anyhow::Result<Vec<Request>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse(&text, keep))
}

/// One request as audited.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Request {
    pub(super) user: String,
    pub(super) verb: String,
    /// `resource`, `resource/subresource`, or the path of a non-resource request.
    pub(super) what: String,
    pub(super) at: Timestamp,
    /// A status write that carries `status.resources` (the member's resource summary).
    pub(super) writes_resources: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: User,
    object_ref: Option<ObjectRef>,
    request_received_timestamp: String,
    request_object: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
}

/// The audited requests of a log's text (other output is skipped), each once: a watch is
/// logged when it starts and again when it ends, under one audit ID.
pub(super) fn parse(text: &str, keep: impl Fn(&str) -> bool) -> Vec<Request> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if !line.starts_with("{\"kind\":\"Event\"") || !keep(line) {
            continue;
        }
        let Ok(l) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        let Ok(at) = l.request_received_timestamp.parse::<Timestamp>() else {
            continue;
        };
        if !seen.insert(l.audit_id) {
            continue;
        }
        let what = match l.object_ref {
            Some(o) if o.subresource.is_empty() => o.resource,
            Some(o) => format!("{}/{}", o.resource, o.subresource),
            None => l
                .request_uri
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned(),
        };
        let writes_resources = l
            .request_object
            .as_ref()
            .is_some_and(|b| b.pointer("/status/resources").is_some());
        out.push(Request {
            user: l.user.username,
            verb: l.verb,
            what,
            at,
            writes_resources,
        });
    }
    out
}

/// Requests that arrived in `[from, to)` and that `keep` accepts, counted by
/// `"<what> <verb>"`.
pub(super) fn count(
    requests: &[Request],
    from: Timestamp,
    to: Timestamp,
    keep: impl Fn(&Request) -> bool,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.at >= from && r.at < to && keep(r))
    {
        *out.entry(format!("{} {}", r.what, r.verb)).or_default() += 1;
    }
    out
}

/// The user a member's API server sees for the control plane: the ServiceAccount the
/// join created there (`<namespace>:<member>-host`).
pub(super) fn control_plane_user(namespace: &str, member: &str) -> String {
    format!("system:serviceaccount:{namespace}:{member}-host")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WATCH_START: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseStarted","requestURI":"/api/v1/pods?watch=true","verb":"watch","user":{"username":"system:serviceaccount:kube-federation-system:member1-host"},"objectRef":{"resource":"pods","apiVersion":"v1"},"requestReceivedTimestamp":"2026-11-28T15:00:01.000000Z","stageTimestamp":"2026-11-28T15:00:01.001000Z"}"#;
    const WATCH_END: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/pods?watch=true","verb":"watch","user":{"username":"system:serviceaccount:kube-federation-system:member1-host"},"objectRef":{"resource":"pods","apiVersion":"v1"},"requestReceivedTimestamp":"2026-11-28T15:00:01.000000Z","stageTimestamp":"2026-11-28T15:05:01.000000Z"}"#;
    const HEALTH: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/healthz?timeout=5s","verb":"get","user":{"username":"system:serviceaccount:kube-federation-system:member1-host"},"requestReceivedTimestamp":"2026-11-28T15:00:02.000000Z","stageTimestamp":"2026-11-28T15:00:02.001000Z"}"#;
    const SUMMARY: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"a3","stage":"ResponseComplete","requestURI":"/apis/core.kubefed.io/v1beta1/namespaces/kube-federation-system/kubefedclusters/member1/status","verb":"patch","user":{"username":"admin"},"objectRef":{"resource":"kubefedclusters","subresource":"status","name":"member1"},"requestReceivedTimestamp":"2026-11-28T15:00:03.000000Z","stageTimestamp":"2026-11-28T15:00:03.001000Z","requestObject":{"status":{"resources":{"pods":4}}}}"#;

    fn log() -> String {
        [
            "I1128 15:00:00.000000 1 server.go:1] not an audit line",
            WATCH_START,
            HEALTH,
            WATCH_END,
            SUMMARY,
        ]
        .join("\n")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn a_watch_is_one_request_and_other_output_is_skipped() {
        let requests = parse(&log(), |_| true);
        let whats: Vec<_> = requests
            .iter()
            .map(|r| (r.what.as_str(), r.verb.as_str()))
            .collect();
        assert_eq!(
            whats,
            [
                ("pods", "watch"),
                ("/healthz", "get"),
                ("kubefedclusters/status", "patch")
            ]
        );
        assert_eq!(
            requests
                .iter()
                .map(|r| r.writes_resources)
                .collect::<Vec<_>>(),
            [false, false, true]
        );
    }

    #[test]
    fn counts_take_the_window_and_the_user() {
        let requests = parse(&log(), |_| true);
        let user = control_plane_user("kube-federation-system", "member1");
        let from = at("2026-11-28T15:00:00Z");
        let c = count(&requests, from, at("2026-11-28T15:00:02Z"), |r| {
            r.user == user
        });
        assert_eq!(c, [("pods watch".to_owned(), 1)].into());
        let c = count(&requests, from, at("2026-11-28T16:00:00Z"), |r| {
            r.user == user
        });
        assert_eq!(c.values().sum::<u64>(), 2);
        let only_member1 = parse(&log(), |l| l.contains("kubefedclusters/member1"));
        assert_eq!(only_member1.len(), 1);
    }

    #[test]
    fn the_policy_file_is_written_and_named_in_the_flags() {
        let dir = std::env::temp_dir().join(format!("flotilla-audit-test-{}", std::process::id()));
        let flags = write_policy(&dir).expect("written");
        let text = std::fs::read_to_string(dir.join("audit-policy.yaml")).expect("read");
        assert!(text.contains("kubefedclusters/status"));
        assert!(flags.iter().any(|f| f.starts_with("--audit-policy-file=")));
        let _ = std::fs::remove_dir_all(dir);
    }
}
