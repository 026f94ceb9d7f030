//! Enhanced fan-out on kinesis-local, through a fault proxy: subscriptions that are refused, end
//! early or break are resumed after the last record received, and counts stay exact; an account
//! or stream that refuses fan-out is read by polling, said in one log line; `teardown`
//! deregisters the consumers. (The exactness suites run in this mode too: the `::aws_efo` tests.)
#![cfg(feature = "aws-local")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::common::fault_proxy::Fault;
use crate::common::{file_in, write_contract_file, Target};

/// Runs `count --until-idle`, which must succeed; returns its warnings.
fn count_until_idle_warnings(t: &Target) -> String {
    let mut c = t.cmd(&["count", "--until-idle"]);
    c.env("RUST_LOG", "warn");
    let out = crate::common::output(c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Refused, cut and broken subscriptions while records keep arriving: every record is counted
/// once, and the counter subscribed again each time.
#[test]
fn subscriptions_that_end_or_fail_resume_exactly() {
    let t = Target::aws_efo("resub", 2);
    let proxy = t.kinesis_proxy.as_ref().unwrap();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 1_500, 40, 23);
    // Split the file in three parts, put while the counter runs.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let parts: Vec<std::path::PathBuf> = lines
        .chunks(lines.len().div_ceil(3))
        .enumerate()
        .map(|(i, c)| {
            let p = file_in(&t, &format!("part{i}.ndjson"));
            std::fs::write(&p, c.join("\n") + "\n").unwrap();
            p
        })
        .collect();

    // Another subscription still active (a lease that just moved), the subscription rate limit,
    // then subscriptions cut after 1.5 s (Kinesis ends each after 5 minutes).
    proxy.inject(
        "SubscribeToShard",
        Fault::Error("ResourceInUseException"),
        2,
    );
    proxy.inject(
        "SubscribeToShard",
        Fault::Error("LimitExceededException"),
        1,
    );
    proxy.inject(
        "SubscribeToShard",
        Fault::EndStreamAfter(Duration::from_millis(1_500)),
        12,
    );
    let mut c = t.spawn("counter", &["count"], &[]);
    for p in &parts {
        t.run(&["replay", p.to_str().unwrap()]);
        std::thread::sleep(Duration::from_millis(2_500));
    }
    t.eventually("every like counted", Duration::from_secs(60), &[&c], || {
        t.json(&["total", "--json"])["total"] == exp.total()
    });
    // The last cut may come after the last record: wait for the subscription that follows it
    // (3 refusals and 12 cuts, each followed by a new one), so that the test does not race it.
    t.eventually(
        "a subscription after every injected fault",
        Duration::from_secs(60),
        &[&c],
        || proxy.seen("SubscribeToShard") > 3 + 12,
    );
    c.signal("TERM");
    assert!(c.wait(Duration::from_secs(30)).success());
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    // Exactly once on the wire too: dedup would hide a record delivered twice (a subscription
    // resumed too early), so the records read are counted from the worker's own reports.
    let read: u64 = c
        .log_text()
        .lines()
        // The stream's shards (app `counter`), not the edges' change log's.
        .filter(|l| l.contains("shard stats") && l.contains("shard{app=counter "))
        .filter_map(|l| {
            l.split("records=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(read, exp.lines as u64, "records read");
    assert_eq!(proxy.remaining(), 0, "every injected fault was met");
    // 3 refusals and 12 cuts, each followed by a new subscription: at least one after them all.
    assert!(
        proxy.seen("SubscribeToShard") > 3 + 12,
        "{} subscriptions",
        proxy.seen("SubscribeToShard")
    );
    // A second run reads nothing twice.
    let again = t.json(&["count", "--until-idle", "--json"]);
    assert_eq!(again["records"], 0);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    t.assert_read_as_configured();
}

/// A stream or account that refuses fan-out (here: no permission to register a consumer) is read
/// by polling, said in one warning, and counted exactly; the check the exactness suites make
/// afterwards (`assert_read_as_configured`) catches such a fallback.
#[test]
fn refused_fan_out_falls_back_to_polling() {
    let t = Target::aws_efo("fallback", 2);
    let proxy = t.kinesis_proxy.as_ref().unwrap();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 600, 20, 29);
    t.run(&["replay", file.to_str().unwrap()]);
    proxy.inject(
        "RegisterStreamConsumer",
        Fault::Error("AccessDeniedException"),
        1,
    );
    let err = count_until_idle_warnings(&t);
    assert!(
        err.contains("enhanced fan-out is not available")
            && err.contains("RegisterStreamConsumer")
            && err.contains("AccessDeniedException")
            && err.contains("by polling GetRecords"),
        "{err}"
    );
    assert_eq!(err.matches("enhanced fan-out is not available").count(), 1);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(proxy.seen("SubscribeToShard"), 0);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.assert_read_as_configured()
    }));
    assert!(
        caught.is_err(),
        "a fallback to polling must not pass as fan-out"
    );
}

/// `teardown` deregisters the applications' consumers (before deleting the stream), and says so.
#[test]
fn teardown_deregisters_the_consumers() {
    let mut t = Target::aws_efo("dereg", 1);
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 200, 10, 31);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    t.run(&["analytics", "--until-idle"]);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    t.teardown = false;
    let out = t.run(&["teardown", "--yes"]);
    let prefix = t.args[t.args.iter().position(|a| a == "--table-prefix").unwrap() + 1].clone();
    for app in ["counter", "analytics"] {
        assert!(
            out.contains(&format!("consumer {prefix}-{app}")),
            "{app}: {out}"
        );
    }
    assert_eq!(
        t.kinesis_proxy
            .as_ref()
            .unwrap()
            .seen("DeregisterStreamConsumer"),
        2
    );
}

/// Registration is throttled at 5 calls a second per stream, which a fleet starting together
/// meets: a throttled registration is tried again, and the app still reads by fan-out.
#[test]
fn throttled_registration_is_tried_again() {
    let t = Target::aws_efo("throttled", 1);
    let proxy = t.kinesis_proxy.as_ref().unwrap();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 300, 10, 37);
    t.run(&["replay", file.to_str().unwrap()]);
    proxy.inject(
        "RegisterStreamConsumer",
        Fault::Error("LimitExceededException"),
        2,
    );
    proxy.inject(
        "DescribeStreamConsumer",
        Fault::Error("LimitExceededException"),
        1,
    );
    let err = count_until_idle_warnings(&t);
    assert!(!err.contains("not available"), "{err}");
    assert_eq!(proxy.remaining(), 0);
    assert_eq!(proxy.seen("RegisterStreamConsumer"), 3);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    t.assert_read_as_configured();
}
