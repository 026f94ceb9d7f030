//! `tally up`: its flags as an [`UpConfig`], where it listens printed with what a producer sets,
//! and the embedded pipeline run until Ctrl-C or SIGTERM (`up::run`).

use anyhow::Result;

use crate::cli::UpArgs;
use crate::settings::Settings;
use crate::up::{self, UpConfig};

/// `tally up`.
pub async fn up(s: &Settings, a: &UpArgs) -> Result<()> {
    let token = a.auth.token()?;
    let cfg = UpConfig {
        ingest: a.ingest_addr,
        api: a.addr,
        token,
    };
    let signed = cfg.token.is_some();
    let stream = s.stream.clone();
    let say = move |b: up::Bound| {
        eprintln!(
            "up: ingest (Kinesis API) on http://{}/  stream {stream}",
            b.ingest
        );
        eprintln!("up: read API and dashboard on http://{}/", b.api);
        eprintln!(
            "up: a producer sets --endpoint-url http://{} and AWS_ACCESS_KEY_ID=tally \
             AWS_SECRET_ACCESS_KEY={} AWS_DEFAULT_REGION=us-east-1; Ctrl-C to stop",
            b.ingest,
            if signed { "<the token>" } else { "<anything>" }
        );
    };
    up::run(s, cfg, say, crate::signal::shutdown()).await
}
