//! `tally serve`: its flags turned into the read side's config (`serve::ServeConfig`), the
//! address bound, and the read side run until Ctrl-C or SIGTERM (`serve::run`).

use anyhow::Result;
use tally_core::ports::Readers;

use crate::cli::ServeArgs;
use crate::serve::{self, auth::Token, ServeConfig};
use crate::settings::Settings;

/// The read side's config from the flags: the pending timeout, and the token read from its
/// file or environment variable.
pub fn config(a: &ServeArgs) -> Result<ServeConfig> {
    let token = Token::from_flags(a.auth_token_file.as_deref(), a.auth_token_env.as_deref())?;
    Ok(ServeConfig {
        pending_timeout: a.pending_timeout,
        token,
    })
}

/// `tally serve`.
pub async fn serve(s: &Settings, readers: Readers, a: &ServeArgs) -> Result<()> {
    let cfg = config(a)?;
    let listener = serve::bind(a.addr).await?;
    serve::say_serving(listener.local_addr()?);
    serve::run(listener, readers, s, cfg, crate::signal::shutdown()).await
}
