//! `tally demo`: its flags as a [`DemoConfig`], the [`crate::demo::Report`] printed.

use anyhow::{bail, Result};

use crate::cli::DemoArgs;
use crate::demo::{watch, Demo, DemoConfig};
use crate::output::print_json;
use crate::settings::{BackendKind, Settings};

pub async fn demo(settings: &Settings, args: &DemoArgs, explicit_data_dir: bool) -> Result<()> {
    // Demo defaults: some retries and some garbage, so the report shows them handled.
    let settings = settings.for_demo(
        args.gen.duplicate_ratio.is_some(),
        args.gen.malformed_ratio.is_some(),
    );
    let demo = Demo::open(&settings, explicit_data_dir, args.keep).await?;
    if settings.backend == BackendKind::Aws && !args.json {
        eprintln!(
            "demo: created stream {} and tables {}-* (deleted afterwards{})",
            demo.settings().stream,
            demo.settings().table_prefix,
            if args.keep {
                " unless --keep: kept"
            } else {
                ""
            }
        );
    }
    let cfg = DemoConfig {
        events: args.events,
        baselines: args.baselines,
        progress: !args.json,
    };
    let ran = run(&demo, &cfg, args).await;
    if let Err(e) = demo.close().await {
        eprintln!("demo: deleting the demo's stream and tables failed: {e}");
    }
    ran
}

/// Runs it, prints the report, then `--serve` if asked.
async fn run(demo: &Demo, cfg: &DemoConfig, args: &DemoArgs) -> Result<()> {
    let report = demo.run(cfg).await?;
    if args.json {
        print_json(&report.json);
    } else {
        print_text(&report.json, &report.wrong);
    }
    if let Some(off) = report.off() {
        bail!(off);
    }
    if let Some(addr) = args.serve {
        watch(demo, addr).await?;
    }
    Ok(())
}

/// The report for a person, read from the report itself (so the text says what `--json` says).
fn print_text(r: &serde_json::Value, wrong: &[(String, i64, i64)]) {
    let yes = |v: &serde_json::Value| if v == true { "yes" } else { "NO" };
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    if r["other_items_skipped"].as_u64().unwrap_or(0) > 0 {
        // A table's change stream: an unlike of an item that does not exist writes no record.
        println!(
            "events produced       {} as a table's changes (+{} duplicates, +{} malformed, +{} of other items, skipped) in {} records",
            r["events"], r["duplicates_injected"], r["malformed_injected"], r["other_items_skipped"], r["records"]
        );
    } else {
        println!(
            "events produced       {} (+{} duplicates, +{} malformed) = {} records",
            r["events"], r["duplicates_injected"], r["malformed_injected"], r["records"]
        );
    }
    println!("expected total        {}", r["expected_total"]);
    println!("counted total         {}", r["counted_total"]);
    println!(
        "posts checked         {} ({} wrong)",
        r["posts_checked"], r["posts_wrong"]
    );
    println!(
        "dead letters          {} (injected {})",
        r["dead_letters"], r["malformed_injected"]
    );
    println!("every count exact     {}", yes(&r["exact"]));
    println!(
        "store writes / event  {:.3} ({} item writes in {} windows; one UpdateItem per like would be 1.000)",
        f("writes_per_event"), r["store_writes"], r["windows"]
    );
    println!("DynamoDB WCU / event  {:.3} (by DynamoDB's rules: 1 KB units, refused conditions charged too; one UpdateItem per like: 1.000)", f("dynamodb_wcu_per_event"));
    let events = f("events").max(1.0);
    let by_purpose: Vec<String> = tally_core::cost::Purpose::ALL
        .iter()
        .map(|p| {
            let n = r["write_units"][p.name()].as_f64().unwrap_or(0.0);
            format!("{} {:.3}", p.name(), n / events)
        })
        .collect();
    println!("  of which / event    {}", by_purpose.join(", "));
    println!(
        "throughput            {:.0} records/s ({:.2}s end to end)",
        f("events_per_sec"),
        f("elapsed_secs")
    );
    let lat = &r["latency_ms"];
    println!(
        "latency (creation→processing)  p50={}ms p90={}ms p99={}ms p99.9={}ms max={}ms",
        lat["p50"], lat["p90"], lat["p99"], lat["p999"], lat["max"]
    );
    if let Some(bl) = r["baselines"].as_object() {
        println!("side by side (write units / items per event, records/s, exact):");
        println!(
            "  tally                     {:.3} / {:.3}, {:.0}/s, {}",
            f("dynamodb_wcu_per_event"),
            f("writes_per_event"),
            f("events_per_sec"),
            yes(&r["exact"])
        );
        for (name, v) in bl {
            println!(
                "  {name:<25} {:.3} / {:.3}, {:.0}/s, {}",
                v["write_units_per_event"].as_f64().unwrap_or(0.0),
                v["items_per_event"].as_f64().unwrap_or(0.0),
                v["events_per_sec"].as_f64().unwrap_or(0.0),
                if v["exact"] == true {
                    "yes".to_owned()
                } else {
                    format!(
                        "no: {} of {} posts off ({})",
                        v["posts_wrong"],
                        v["posts_checked"],
                        v["why_off"].as_str().unwrap_or_default()
                    )
                }
            );
        }
    }
    println!("top 10 trending:");
    for (i, e) in r["trending"].as_array().into_iter().flatten().enumerate() {
        let post = e["post_id"].as_str().unwrap_or("");
        println!(
            "  {:>2}. {post:<12} {:>10.1}",
            i + 1,
            e["score"].as_f64().unwrap_or(0.0)
        );
    }
    for (post, expected, got) in wrong.iter().take(10) {
        println!("  WRONG {post}: expected {expected}, counted {got}");
    }
}
