//! `tally ingest`: its flags as an [`IngestConfig`], the address bound, and the embedded stream
//! served in the Kinesis API's shape until Ctrl-C or SIGTERM (`tally_ingest::run`).

use anyhow::{bail, Result};

use crate::backend::Backend;
use crate::cli::IngestArgs;
use crate::settings::{BackendKind, Settings};
use tally_ingest::IngestConfig;

/// `tally ingest`.
pub async fn ingest(s: &Settings, b: &Backend, a: &IngestArgs) -> Result<()> {
    if s.backend == BackendKind::Aws {
        bail!(
            "tally ingest serves the embedded stream; on AWS, producers put to the Kinesis \
             stream {} itself (docs/SENDING-LIKES.md)",
            s.stream
        );
    }
    let token = a.auth.token()?;
    let cfg = IngestConfig {
        stream: s.stream.clone(),
        token,
        retention_hours: s.stream_retention_hours,
    };
    let listener = tally_serve::bind(a.addr).await?;
    tally_serve::say_serving(listener.local_addr()?);
    eprintln!(
        "ingest: stream {} in the Kinesis API's shape{}",
        s.stream,
        if cfg.token.is_some() {
            " (requests signed with the token as the secret access key)"
        } else {
            ""
        }
    );
    tally_ingest::run(listener, b.stream.clone(), cfg, crate::signal::shutdown()).await
}
