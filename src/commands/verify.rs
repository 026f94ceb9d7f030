//! `tally verify`: its flags and settings turned into `tally_verify::VerifyConfig`, the check
//! run, its report printed and its exit status set (`tally_verify::Verified::print`).

use anyhow::Result;
use tally_verify::{Ports, Rule, VerifyConfig};

use crate::backend::Backend;
use crate::cli::VerifyArgs;
use crate::settings::Settings;

/// The check's config from the flags and the settings the store was counted by.
pub fn config(s: &Settings, a: &VerifyArgs) -> VerifyConfig {
    VerifyConfig {
        from: a.from.clone(),
        since: a.since.iter().map(|s| s.ms).collect(),
        memory: a.memory,
        rule: Rule {
            mode: s.counter.count,
            horizon_ms: tally_core::config::millis(s.counter.dedup_horizon) as i64,
            input: s.record_input(),
        },
    }
}

/// `tally verify` (a progress bar unless `--json`).
pub async fn verify(s: &Settings, b: &Backend, a: &VerifyArgs) -> Result<()> {
    let ports = Ports {
        stream: b.stream.as_ref(),
        counter: b.counter.as_ref(),
        leases: b.leases.as_ref(),
    };
    let cfg = config(s, a);
    let pb = crate::progress::start(None, "records", a.json);
    let checked = tally_verify::check(ports, &cfg, &crate::progress::Bar(&pb)).await;
    crate::progress::finish(&pb);
    checked?.print(a.json, a.show)
}
