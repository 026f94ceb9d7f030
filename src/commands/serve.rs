//! `tally serve`: its flags turned into the read side's config (`tally_serve::ServeConfig`), the
//! address bound, and the read side run until Ctrl-C or SIGTERM (`tally_serve::run`).

use anyhow::Result;
use tally_core::ports::Readers;

use crate::cli::ServeArgs;
use crate::settings::Settings;
use tally_serve::ServeConfig;

/// The read side's config from the flags: the pending timeout, and the token read from its
/// file or environment variable.
pub fn config(s: &Settings, a: &ServeArgs) -> Result<ServeConfig> {
    let token = a.auth.token()?;
    Ok(ServeConfig {
        pending_timeout: a.pending_timeout,
        token,
        half_life: s.analytics.half_life,
    })
}

/// `tally serve`.
pub async fn serve(s: &Settings, readers: Readers, a: &ServeArgs) -> Result<()> {
    let cfg = config(s, a)?;
    let listener = tally_serve::bind(a.addr).await?;
    tally_serve::say_serving(listener.local_addr()?);
    tally_serve::run(listener, readers, cfg, crate::signal::shutdown()).await
}
