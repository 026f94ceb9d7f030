//! `tally rebuild`: its flags as a [`RebuildSource`], what was rebuilt printed.

use anyhow::Result;
use serde_json::json;

use crate::cli::RebuildArgs;
use crate::output::print_json;
use crate::rebuild::{rebuild, RebuildSource};
use crate::settings::Settings;

pub async fn run_rebuild(settings: &Settings, args: &RebuildArgs) -> Result<()> {
    let source = match (&args.from_data_dir, &args.from_table_prefix) {
        (Some(d), _) => RebuildSource::DataDir(d.clone()),
        (None, Some(p)) => RebuildSource::TablePrefix(p.clone()),
        (None, None) => unreachable!("clap requires one"),
    };
    let done = rebuild(settings, &source).await?;
    if args.json {
        print_json(&json!({
            "edges": done.edges, "likes": done.likes, "posts": done.posts,
            "checkpoints": done.checkpoints, "dead_letters": done.dead_letters,
            "resumed": done.resumed,
        }));
    } else {
        println!(
            "{} {} edges ({} likes on {} posts), {} checkpoints and {} dead letters into this \
             store; run `tally count` to count them (it counts the copied edges from their \
             change log, and goes on from the copied checkpoints)",
            if done.resumed {
                "resumed: copied"
            } else {
                "copied"
            },
            done.edges,
            done.likes,
            done.posts,
            done.checkpoints,
            done.dead_letters,
        );
    }
    Ok(())
}
