//! `tally verify`: its flags turned into `verify::VerifyConfig`, the check run, its report
//! printed and its exit status set (`verify::Verified::print`).

use anyhow::Result;

use crate::backend::Backend;
use crate::cli::VerifyArgs;
use crate::settings::Settings;
use crate::verify::{self, VerifyConfig};

/// The check's config from the flags (a progress bar unless `--json`).
pub fn config(a: &VerifyArgs) -> VerifyConfig {
    VerifyConfig {
        from: a.from.clone(),
        since: a.since.clone(),
        memory: a.memory,
        progress: !a.json,
    }
}

/// `tally verify`.
pub async fn verify(s: &Settings, b: &Backend, a: &VerifyArgs) -> Result<()> {
    verify::check(s, b, &config(a)).await?.print(a.json, a.show)
}
