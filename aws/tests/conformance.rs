//! The port conformance suite on the AWS adapters, against the local API peers
//! (`scripts/local-aws.sh start`; compiled with `--features aws-local`).
#![allow(clippy::unwrap_used)]
#![cfg(feature = "aws-local")]

use tally_aws::{Aws, AwsSettings};

/// A fresh stream and tables, deleted again when dropped (the local peers cap shards in total).
struct Fresh {
    aws: Aws,
    settings: AwsSettings,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let s = self.settings.clone();
        // Best effort, on a runtime of its own: the test's runtime is ending.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().map(|rt| rt.block_on(tally_aws::setup::teardown(&s)))
        })
        .join();
    }
}

async fn fresh(name: &str, shards: usize) -> Fresh {
    let unique = format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 1_000_000_000
    );
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ] {
        if std::env::var(k).is_err() {
            // Test credentials for the local peers only; set before any client exists.
            std::env::set_var(k, v);
        }
    }
    let s = AwsSettings {
        stream_retention_hours: 24,
        stream: format!("conf-{unique}"),
        table_prefix: format!("conf-{unique}"),
        kinesis_endpoint_url: Some(
            std::env::var("TEST_KINESIS_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:4568".into()),
        ),
        dynamodb_endpoint_url: Some(
            std::env::var("TEST_DYNAMODB_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:8000".into()),
        ),
    };
    tally_aws::setup::setup(&s, shards).await.unwrap();
    Fresh {
        aws: Aws::connect(&s).await.unwrap(),
        settings: s,
    }
}

#[tokio::test]
async fn stream() {
    let f = fresh("stream", 3).await;
    tally_conformance::stream_put_and_read(&f.aws.stream).await;
}

#[tokio::test]
async fn leases() {
    let f = fresh("leases", 1).await;
    tally_conformance::leases_are_fenced(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn counter() {
    let f = fresh("counter", 1).await;
    tally_conformance::counter_commits_exactly_once(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn largest_window() {
    let f = fresh("largest", 1).await;
    tally_conformance::the_largest_window_fits_the_store(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn analytics() {
    let f = fresh("analytics", 1).await;
    tally_conformance::analytics_snapshots_are_fenced(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn dedup_expiry() {
    let f = fresh("dedupexp", 1).await;
    tally_conformance::dedup_records_expire_by_arrival(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn gaps() {
    let f = fresh("gaps", 1).await;
    tally_conformance::gaps_are_recorded_with_the_checkpoint(&f.aws.tables, "aws").await;
}

#[tokio::test]
async fn stale_writer() {
    let f = fresh("stale", 1).await;
    tally_conformance::a_paused_stale_writer_counts_nothing_twice(&f.aws.tables, "aws").await;
}
