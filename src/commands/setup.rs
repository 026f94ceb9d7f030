//! `tally setup`: create the stream and tables if missing (development and tests; production
//! uses Terraform).

use anyhow::Result;

use crate::backend::aws_settings;
use crate::settings::{BackendKind, Settings};

pub async fn setup(s: &Settings) -> Result<()> {
    match s.backend {
        BackendKind::Embedded => {
            let e = tally_embedded::Embedded::open(&s.data_dir, s.shards)?;
            println!(
                "embedded store ready at {} with {} shards",
                e.path().display(),
                e.shard_count()?
            );
        }
        BackendKind::Aws => {
            let report = tally_aws::setup::setup(&aws_settings(s), s.shards).await?;
            println!("{report}");
        }
    }
    Ok(())
}

/// `tally reshard --split SHARD`.
pub async fn reshard(s: &Settings, a: &crate::cli::ReshardArgs) -> Result<()> {
    let children = match s.backend {
        BackendKind::Embedded => {
            let (a1, a2) =
                tally_embedded::Embedded::open(&s.data_dir, s.shards)?.split_shard(&a.split)?;
            vec![a1, a2]
        }
        BackendKind::Aws => tally_aws::setup::split_shard(&aws_settings(s), &a.split).await?,
    };
    println!("split {} into {}", a.split, children.join(" and "));
    Ok(())
}
