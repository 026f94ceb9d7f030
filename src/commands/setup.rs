//! `tally setup`: create the stream and tables if missing (development and tests; production
//! uses Terraform).

use anyhow::Result;

use crate::backend;
use crate::settings::{BackendKind, Settings};

pub async fn setup(settings: &Settings, args: &crate::cli::SetupArgs) -> Result<()> {
    // `--shards` shapes a new stream only; an existing one with another count is not resharded
    // behind the user's back, nor silently left as it is.
    if let Some(wanted) = args.shards {
        let existing = backend::open_shard_count(settings).await?;
        if let Some(n) = existing.filter(|n| *n != wanted) {
            anyhow::bail!(
                "the stream already exists with {n} open shards; --shards {wanted} only shapes a \
                 new stream (split a shard with `tally reshard --split SHARD_ID`{})",
                if settings.backend == BackendKind::Aws {
                    ", or UpdateShardCount"
                } else {
                    ""
                }
            );
        }
    }
    println!("{}", backend::create(settings).await?);
    Ok(())
}

/// `tally teardown --yes`: the counterpart of `setup`, for development and tests.
pub async fn teardown(settings: &Settings, args: &crate::cli::TeardownArgs) -> Result<()> {
    let what = match settings.backend {
        BackendKind::Embedded => format!("the embedded store in {}", settings.data_dir.display()),
        BackendKind::Aws => format!(
            "stream {} and the tables prefixed {}",
            settings.stream, settings.table_prefix
        ),
    };
    if !args.yes {
        anyhow::bail!("teardown deletes {what} with every count in it; add --yes to confirm");
    }
    println!("{}", backend::delete(settings).await?);
    Ok(())
}

/// `tally trim --older-than DURATION` (embedded: the stream's retention, applied by hand).
pub fn trim(settings: &Settings, args: &crate::cli::TrimArgs) -> Result<()> {
    match settings.backend {
        BackendKind::Embedded => {
            let cutoff = tally_core::clock::now_ms() - args.older_than.as_millis() as i64;
            let unapplied = backend::unapplied_before(settings, cutoff)?;
            if !unapplied.is_empty() {
                let mut by_app: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
                for (app, shard_id, records) in &unapplied {
                    by_app
                        .entry(app.as_str())
                        .or_default()
                        .push(format!("{records} on {shard_id}"));
                }
                let what: Vec<String> = by_app
                    .iter()
                    .map(|(app, v)| format!("{app}: {}", v.join(", ")))
                    .collect();
                if !args.yes {
                    anyhow::bail!(
                        "trim would drop records not applied yet ({}); each application would \
                         record them as a gap (`tally dead-letters`) and its counts would miss \
                         them: run the applications first, or add --yes to drop them anyway",
                        what.join("; ")
                    );
                }
                eprintln!("dropping records not applied yet ({})", what.join("; "));
            }
            let (records, shards) = backend::trim(settings, cutoff)?;
            println!("trimmed {records} records; dropped {shards} empty closed shards");
            Ok(())
        }
        BackendKind::Aws => anyhow::bail!(
            "on AWS the stream's retention period trims records (see `terraform/`); `tally trim` is for the embedded stream"
        ),
    }
}

/// `tally reshard --split SHARD`.
pub async fn reshard(settings: &Settings, args: &crate::cli::ReshardArgs) -> Result<()> {
    let children = backend::split_shard(settings, &args.split).await?;
    println!("split {} into {}", args.split, children.join(" and "));
    Ok(())
}
