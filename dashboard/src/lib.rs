//! The live web dashboard (`flotilla dashboard`, and the controller-manager's optional
//! `--dashboard-addr`): one page with the member clusters and a grid of federated
//! objects × clusters, a page per object, updated live as status changes.
//!
//! Layers, each its own module: [`feed`] watches the host (read-only) into [`state`];
//! [`view`] turns the state into view models (pure); [`html`] renders them (pure);
//! [`server`] answers HTTP from the current state and [`sse`] tells open pages when the
//! state's version moves on. No page ever makes the dashboard call the API server.

pub mod access;
pub mod feed;
pub mod html;
pub mod query;
pub mod server;
pub mod sse;
pub mod state;
pub mod view;

use std::net::SocketAddr;

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use flotilla_multicluster::http::auth::{self as http_auth, Exposure};

/// The default address of `flotilla dashboard`: loopback only.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8090";

/// Starts the watches on `host` (KubeFedClusters and types in `kubefed_ns`) and the
/// server on `addr`; both stop when `cancel` fires. Returns the address served. On a
/// non-loopback address every request is authenticated against `host` unless
/// `insecure_no_auth` (see [`flotilla_multicluster::http::auth`]).
pub async fn start(
    host: Client,
    kubefed_ns: &str,
    addr: SocketAddr,
    insecure_no_auth: bool,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let guard = match http_auth::exposure(&addr, insecure_no_auth) {
        Exposure::Loopback => None,
        Exposure::InsecureOpen => {
            warn!(%addr, "the dashboard is served without authentication to anyone who can reach it (--insecure-no-auth)");
            None
        }
        Exposure::Authenticated => Some(server::Guard {
            auth: http_auth::Authenticator::new(host.clone()),
            kubefed_ns: kubefed_ns.to_owned(),
        }),
    };
    let shared = state::Shared::default();
    let local = server::serve(addr, shared.clone(), cancel.clone(), guard).await?;
    feed::start(host, kubefed_ns, shared, cancel);
    Ok(local)
}

/// The URL people open for a server on `addr` (`0.0.0.0` is shown as `127.0.0.1`).
pub fn url(addr: SocketAddr) -> String {
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        }
    };
    format!("http://{host}:{}/", addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_url_names_an_address_a_browser_can_open() {
        assert_eq!(
            url("127.0.0.1:8090".parse().expect("addr")),
            "http://127.0.0.1:8090/"
        );
        assert_eq!(
            url("0.0.0.0:80".parse().expect("addr")),
            "http://127.0.0.1:80/"
        );
        assert_eq!(
            url("[::1]:8090".parse().expect("addr")),
            "http://[::1]:8090/"
        );
    }

    /// 10,000 federated objects on 2 clusters: one overview page (HTML and JSON), the
    /// "only problems" filter, a late page, and the live fragment, each timed (printed;
    /// see docs/dashboard.md). The bound is loose: a debug build on a busy machine.
    #[test]
    fn ten_thousand_objects_render_a_page_quickly() {
        let shared = state::Shared::new(view::overview::tests::state(10_000));
        let mut timings = Vec::new();
        for (what, path, query) in [
            ("overview page (HTML)", "/", ""),
            ("live fragment", "/", "fragment=1"),
            ("only problems", "/", "problems=1"),
            ("page 80", "/", "page=80"),
            ("overview JSON", "/api/overview", ""),
        ] {
            let start = Instant::now();
            let r = server::respond(&shared, path, query);
            let took = start.elapsed();
            assert_eq!(r.status, http::StatusCode::OK, "{what}");
            assert!(
                r.body.len() < 200_000,
                "{what}: one page, not every object ({} bytes)",
                r.body.len()
            );
            timings.push(format!(
                "{what}: {:.1} ms, {} kB",
                took.as_secs_f64() * 1e3,
                r.body.len() / 1024
            ));
            assert!(took.as_secs() < 2, "{what} took {took:?}");
        }
        println!("10,000 objects × 2 clusters: {}", timings.join("; "));
    }

    /// What a relist of 10,000 federated objects costs the feed: decoding each spec and
    /// status once (timed, printed).
    #[test]
    fn ten_thousand_listed_objects_are_decoded_quickly() {
        let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "types.kubefed.io",
            "v1beta1",
            "FederatedDeployment",
        ));
        let listed: Vec<kube::api::DynamicObject> = (0..10_000)
            .map(|i| {
                kube::api::DynamicObject::new(&format!("web-{i}"), &ar)
                    .within("demo")
                    .data(serde_json::json!({
                        "spec": {"template": {"spec": {"replicas": 3, "template": {"spec": {
                                    "containers": [{"name": "web", "image": "nginx"}]}}}},
                                 "placement": {"clusterSelector": {}},
                                 "overrides": [{"clusterName": "m2", "clusterOverrides": [
                                     {"path": "/spec/replicas", "value": 5}]}]},
                        "status": {"observedGeneration": 1,
                                   "conditions": [{"type": "Propagation", "status": "True"}],
                                   "clusters": [{"name": "m1"}, {"name": "m2"}]}
                    }))
            })
            .collect();
        let shared = state::Shared::default();
        let start = Instant::now();
        let change = feed::prepare_relist("deployments.apps", "FederatedDeployment", &listed);
        let decoded = start.elapsed();
        let start = Instant::now();
        shared.update(change);
        let locked = start.elapsed();
        assert_eq!(shared.read().objects.len(), 10_000);
        println!(
            "a relist of 10,000 federated objects: decoded in {:.1} ms (pages still served), swapped in under the lock in {:.1} ms",
            decoded.as_secs_f64() * 1e3,
            locked.as_secs_f64() * 1e3
        );
        assert!(decoded.as_secs() < 5, "decoding took {decoded:?}");
        assert!(locked.as_secs() < 1, "the lock was held {locked:?}");
    }
}
