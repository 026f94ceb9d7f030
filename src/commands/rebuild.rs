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
            "shards": done.shards, "already": done.already, "edges": done.edges,
            "orphans": done.orphans, "likes": done.likes, "posts": done.posts,
            "dead_letters": done.dead_letters,
        }));
    } else {
        println!(
            "rebuilt {} shards ({} found done by an earlier run) from {} edges: {} likes on {} posts, {} dead letters{}",
            done.shards,
            done.already,
            done.edges,
            done.likes,
            done.posts,
            done.dead_letters,
            if done.orphans > 0 {
                format!(
                    " ({} edges written by a shard the source has no lease row for, counted with the first shard)",
                    done.orphans
                )
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
