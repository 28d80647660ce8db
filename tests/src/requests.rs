//! Requests an API server has served, from its own `apiserver_request_total`: what tests
//! count when "nothing was written" must mean no request at all (a no-op write leaves the
//! object's resourceVersion alone, so versions cannot tell).

use kube::Client;

/// Write requests (POST, PUT, PATCH, APPLY, DELETE) served so far for the given resources
/// (subresources included).
pub async fn writes(client: &Client, resources: &[&str]) -> anyhow::Result<u64> {
    requests(
        client,
        &["POST", "PUT", "PATCH", "APPLY", "DELETE"],
        resources,
    )
    .await
}

/// Requests with one of `verbs` (`GET`, `LIST`, `WATCH`, `APPLY`, ...) the API server behind
/// `client` has served for any of `resources`, from its `apiserver_request_total`.
pub async fn requests(client: &Client, verbs: &[&str], resources: &[&str]) -> anyhow::Result<u64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| verbs.iter().any(|v| l.contains(&format!("verb=\"{v}\""))))
        .filter(|l| {
            resources
                .iter()
                .any(|r| l.contains(&format!("resource=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum())
}
