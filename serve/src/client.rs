//! The read side's HTTP client: one bounded GET (the ECS metadata endpoint, `tally probe`).

use anyhow::{Context, Result};

/// One GET of a plain http:// URL within `timeout` (hyper's HTTP/1.1 client); the body of a
/// 200 answer, else an error naming what happened (not a URL, cannot connect, no answer in
/// time, another status).
pub async fn get_text(url: &str, timeout: std::time::Duration) -> Result<String> {
    use http_body_util::BodyExt;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not a URL"))?;
    if uri.scheme_str() != Some("http") {
        anyhow::bail!("{url:?} is not an http:// URL");
    }
    let client =
        Client::builder(TokioExecutor::new()).build_http::<http_body_util::Empty<bytes::Bytes>>();
    let answer = tokio::time::timeout(timeout, client.get(uri))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{url} did not answer within {}",
                humantime::format_duration(timeout)
            )
        })?;
    let resp = match answer {
        Ok(resp) => resp,
        Err(e) if e.is_connect() => anyhow::bail!("cannot connect to {url}: {e}"),
        Err(e) => anyhow::bail!("{url}: {e}"),
    };
    anyhow::ensure!(
        resp.status() == hyper::StatusCode::OK,
        "{url} answered {}",
        resp.status()
    );
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `tally probe URL`, the container health check: one GET bounded by 3 s; Ok only for status
/// 200.
pub async fn probe(url: &str) -> Result<()> {
    get_text(url, std::time::Duration::from_secs(3))
        .await
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("probe: {e:#}"))
}
