//! `tally setup`: create the stream and tables if missing (development and tests; production
//! uses Terraform).

use std::path::PathBuf;

use anyhow::Result;

use crate::backend::aws_settings;
use crate::settings::{BackendKind, Settings};

pub async fn setup(s: &Settings, a: &crate::cli::SetupArgs) -> Result<()> {
    // `--shards` shapes a new stream only; an existing one with another count is not resharded
    // behind the user's back, nor silently left as it is.
    if let Some(wanted) = a.shards {
        let existing = match s.backend {
            BackendKind::Embedded => match tally_embedded::Embedded::open_existing(&s.data_dir) {
                Ok(e) => Some(e.open_shard_count()?),
                Err(tally_core::ports::PortError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            },
            BackendKind::Aws => tally_aws::setup::open_shard_count(&aws_settings(s)).await?,
        };
        if let Some(n) = existing.filter(|n| *n != wanted) {
            anyhow::bail!(
                "the stream already exists with {n} open shards; --shards {wanted} only shapes a \
                 new stream (split a shard with `tally reshard --split SHARD_ID`{})",
                if s.backend == BackendKind::Aws {
                    ", or UpdateShardCount"
                } else {
                    ""
                }
            );
        }
    }
    match s.backend {
        BackendKind::Embedded => {
            let e = tally_embedded::Embedded::open(&s.data_dir, s.shards)?;
            println!(
                "embedded store ready at {} with {} open shards",
                e.path().display(),
                e.open_shard_count()?
            );
        }
        BackendKind::Aws => {
            let report = tally_aws::setup::setup(&aws_settings(s), s.shards).await?;
            println!("{report}");
        }
    }
    Ok(())
}

/// `tally teardown --yes`: the counterpart of `setup`, for development and tests.
pub async fn teardown(s: &Settings, a: &crate::cli::TeardownArgs) -> Result<()> {
    let what = match s.backend {
        BackendKind::Embedded => format!("the embedded store in {}", s.data_dir.display()),
        BackendKind::Aws => format!(
            "stream {} and the tables prefixed {}",
            s.stream, s.table_prefix
        ),
    };
    if !a.yes {
        anyhow::bail!("teardown deletes {what} with every count in it; add --yes to confirm");
    }
    match s.backend {
        BackendKind::Embedded => {
            let db = s.data_dir.join(tally_embedded::DB_FILE);
            let mut deleted = Vec::new();
            for suffix in ["", "-wal", "-shm"] {
                let f = PathBuf::from(format!("{}{suffix}", db.display()));
                match std::fs::remove_file(&f) {
                    Ok(()) => deleted.push(f.display().to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => anyhow::bail!("cannot delete {}: {e}", f.display()),
                }
            }
            if deleted.is_empty() {
                println!("nothing to delete");
            } else {
                println!("deleted: {}", deleted.join(", "));
            }
        }
        BackendKind::Aws => println!("{}", tally_aws::setup::teardown(&aws_settings(s)).await?),
    }
    Ok(())
}

/// `tally trim --older-than DURATION` (embedded: the stream's retention, applied by hand).
pub fn trim(s: &Settings, a: &crate::cli::TrimArgs) -> Result<()> {
    match s.backend {
        BackendKind::Embedded => {
            let e = tally_embedded::Embedded::open_existing(&s.data_dir)?;
            let cutoff = tally_consumer::worker::now_ms() - a.older_than.as_millis() as i64;
            let unapplied = e.unapplied_before(cutoff)?;
            if !unapplied.is_empty() {
                let mut by_app: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
                for u in &unapplied {
                    by_app
                        .entry(u.app.as_str())
                        .or_default()
                        .push(format!("{} on {}", u.records, u.shard_id));
                }
                let what: Vec<String> = by_app
                    .iter()
                    .map(|(app, v)| format!("{app}: {}", v.join(", ")))
                    .collect();
                if !a.yes {
                    anyhow::bail!(
                        "trim would drop records not applied yet ({}); each application would \
                         record them as a gap (`tally dead-letters`) and its counts would miss \
                         them: run the applications first, or add --yes to drop them anyway",
                        what.join("; ")
                    );
                }
                eprintln!("dropping records not applied yet ({})", what.join("; "));
            }
            let (records, shards) = e.trim(cutoff)?;
            println!("trimmed {records} records; dropped {shards} empty closed shards");
            Ok(())
        }
        BackendKind::Aws => anyhow::bail!(
            "on AWS the stream's retention period trims records (see `terraform/`); `tally trim` is for the embedded stream"
        ),
    }
}

/// `tally reshard --split SHARD`.
pub async fn reshard(s: &Settings, a: &crate::cli::ReshardArgs) -> Result<()> {
    let children = match s.backend {
        BackendKind::Embedded => {
            let (a1, a2) =
                tally_embedded::Embedded::open_existing(&s.data_dir)?.split_shard(&a.split)?;
            vec![a1, a2]
        }
        BackendKind::Aws => tally_aws::setup::split_shard(&aws_settings(s), &a.split).await?,
    };
    println!("split {} into {}", a.split, children.join(" and "));
    Ok(())
}
