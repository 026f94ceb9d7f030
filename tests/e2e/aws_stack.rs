//! On the local AWS API peers (kinesis-local, DynamoDB Local): the whole pipeline through the SDK paths,
//! the errors a user without the stack or without `tally setup` sees, and injected throttling,
//! conflicts and lost answers — counts exact through all of it.
#![allow(clippy::unwrap_used)]
#![cfg(feature = "aws-local")]

use std::collections::BTreeMap;

use crate::common::fault_proxy::{Fault, FaultProxy};
use crate::common::{file_in, write_contract_file, Target};

fn endpoints() -> (String, String) {
    (
        std::env::var("TEST_KINESIS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4568".into()),
        std::env::var("TEST_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into()),
    )
}

#[test]
fn demo_runs_on_its_own_stream_and_tables_and_deletes_them() {
    let (kinesis, dynamodb) = endpoints();
    let t = Target::aws_at("demo", &kinesis, &dynamodb);
    let v = t.json(&[
        "demo", "--events", "2000", "--posts", "100", "--shards", "2", "--seed", "4", "--json",
    ]);
    assert_eq!(v["backend"], "aws", "{v}");
    assert_eq!(v["exact"], true, "{v}");
    assert_eq!(v["events"], 2000);
    assert_eq!(v["counted_total"], v["expected_total"]);
    assert_eq!(v["dead_letters"], v["malformed_injected"]);
    // The demo's stream was its own, and it is gone again; the target's names were never used.
    let stream = v["stream"].as_str().unwrap().to_owned();
    assert!(stream.contains("-demo-"), "{stream}");
    let err =
        String::from_utf8_lossy(&t.fail(&["--stream", &stream, "total"], &[]).stderr).into_owned();
    assert!(err.contains("tally setup"), "{err}");
    let err = String::from_utf8_lossy(&t.fail(&["total"], &[]).stderr).into_owned();
    assert!(err.contains("tally setup"), "{err}");
}

#[test]
fn produce_count_analytics_query_on_two_shards() {
    let t = Target::aws("e2e", 2);
    let truth_file = file_in(&t, "truth.json");
    let p = t.json(&[
        "produce",
        "--events",
        "5000",
        "--posts",
        "150",
        "--duplicate-ratio",
        "0.02",
        "--malformed-ratio",
        "0.005",
        "--seed",
        "4",
        "--truth",
        truth_file.to_str().unwrap(),
        "--json",
    ]);
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    assert_eq!(p["events"], 5000);
    assert!(truth["duplicates"].as_u64().unwrap() > 0 && truth["malformed"].as_u64().unwrap() > 0);

    let c = t.json(&["count", "--until-idle", "--json"]);
    let copies = truth["duplicates"].as_u64().unwrap() as usize;
    crate::common::assert_read_all(&c, 5000 + copies, copies);
    let a = t.json(&["analytics", "--until-idle", "--json"]);
    assert_eq!(a["records"], p["records"]);

    let expected: BTreeMap<String, i64> = serde_json::from_value(truth["counts"].clone()).unwrap();
    assert_eq!(t.mismatches(&expected), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], truth["total"]);
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        truth["malformed"]
    );
    // Everything was created just now: all of it is "since 1 hour".
    let q = t.query_one(&["query", "p1", "--since", "1h", "--json"]);
    assert_eq!(q["count_since"], q["count"]);
    assert_eq!(q["count"], expected["p1"]);
    let top = t.json(&["top", "--k", "3", "--json"]);
    assert_eq!(
        top["trending"][0]["post_id"], "p1",
        "the Zipf head trends: {top}"
    );
    let lat = t.json(&["latency", "--json"]);
    assert_eq!(lat["creation_ms"]["count"], 5000);
    let leases = t.json(&["leases", "--json"]);
    assert_eq!(leases.as_array().unwrap().len(), 2);
    assert!(
        leases
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["checkpoint"].is_string()),
        "{leases}"
    );
}

#[test]
fn errors_name_the_endpoint_and_the_missing_resource() {
    let (kinesis, dynamodb) = endpoints();
    // Nothing listens on port 9 of the loopback.
    let t = Target::aws_at("down", "http://127.0.0.1:9", &dynamodb);
    let err = String::from_utf8_lossy(&t.fail(&["total"], &[]).stderr).into_owned();
    assert!(
        err.contains("http://127.0.0.1:9") && err.contains("Kinesis"),
        "{err}"
    );

    let t = Target::aws_at("missing", &kinesis, &dynamodb);
    let err = String::from_utf8_lossy(&t.fail(&["count", "--until-idle"], &[]).stderr).into_owned();
    assert!(
        err.contains("stream s-missing") && err.contains("tally setup"),
        "{err}"
    );

    // The stream exists, the tables do not (another prefix).
    let t = Target::aws("tables", 1);
    let mut args: Vec<String> = t.args.clone();
    let i = args.iter().position(|a| a == "--table-prefix").unwrap();
    args[i + 1] = format!("{}-other", args[i + 1]);
    let out = crate::common::output({
        let mut c = std::process::Command::new(crate::common::tally_bin());
        c.arg("total")
            .args(&args)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1");
        c
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("-other-leases") && err.contains("tally setup"),
        "{err}"
    );

    // Teardown asks for confirmation, then deletes the stream and every table.
    let err = String::from_utf8_lossy(&t.fail(&["teardown"], &[]).stderr).into_owned();
    assert!(err.contains("--yes"), "{err}");
    let out = t.run(&["teardown", "--yes"]);
    assert!(
        out.contains("stream s-tables") && out.contains("-leases"),
        "{out}"
    );
    let err = String::from_utf8_lossy(&t.fail(&["total"], &[]).stderr).into_owned();
    assert!(err.contains("tally setup"), "{err}");
    assert!(t.run(&["teardown", "--yes"]).contains("nothing to delete"));
}

#[test]
fn injected_faults_keep_counts_exact() {
    let (kinesis, dynamodb) = endpoints();
    let (kp, dp) = (FaultProxy::start(&kinesis), FaultProxy::start(&dynamodb));
    let mut t = Target::aws_at("faults", &kp.url, &dp.url);
    t.run(&["setup", "--shards", "2"]);
    t.teardown = true;
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 1_500, 40, 17);

    // Producer: partial failures (half the entries of a call really not written) and throttling.
    kp.inject("PutRecords", Fault::PartialPut, 3);
    kp.inject(
        "PutRecords",
        Fault::Error("ProvisionedThroughputExceededException"),
        4,
    );
    let r = t.json(&["replay", file.to_str().unwrap(), "--json"]);
    assert_eq!(r["records"], exp.lines as u64);
    assert!(r["resent"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(kp.remaining(), 0);

    // Consumer: throttled reads, an expired iterator, throttled writes, and writes whose answers
    // were lost after they were applied (a summary item, a lease row, a dedup record).
    kp.inject(
        "GetRecords",
        Fault::Error("ProvisionedThroughputExceededException"),
        5,
    );
    kp.inject("GetRecords", Fault::Error("ExpiredIteratorException"), 1);
    dp.inject("UpdateItem", Fault::Error("ThrottlingException"), 4);
    dp.inject("UpdateItem", Fault::DropAfterForward, 6);
    dp.inject(
        "UpdateItem",
        Fault::Error("ProvisionedThroughputExceededException"),
        2,
    );
    dp.inject("PutItem", Fault::DropAfterForward, 2);
    let c = t.json_env(
        &["count", "--until-idle", "--json"],
        &[("TALLY_COUNTER__WINDOW_RECORDS", "200")],
    );
    assert_eq!(
        kp.remaining() + dp.remaining(),
        0,
        "every injected fault was met"
    );
    assert!(dp.seen("UpdateItem") > 13 && kp.seen("GetRecords") > 6);
    crate::common::assert_read_all(&c, exp.lines - exp.malformed, exp.duplicates);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        exp.malformed as u64
    );
}
