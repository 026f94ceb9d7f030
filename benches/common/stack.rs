//! Running `tally` as a bench does: quiet, with the local peers' fake credentials, against an
//! embedded data dir or a fresh stream and tables on the local AWS peers.

use std::path::Path;
use std::process::{Command, Stdio};

/// `tally CMD ARGS`: errors only in the log, no input, the local peers' fake credentials (unused
/// by the embedded store).
pub fn tally(args: &[String], cmd: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tally"));
    c.args(cmd)
        .args(args)
        .env("RUST_LOG", "error")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdin(Stdio::null());
    c
}

/// The flags of a stream and tables named `<name>` on the local peers at these endpoints (and
/// a data dir for what the binary keeps beside them, when given).
pub fn aws_args(kinesis: &str, dynamodb: &str, name: &str, data_dir: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--backend",
        "aws",
        "--stream",
        &format!("s-{name}"),
        "--table-prefix",
        &format!("t-{name}"),
        "--kinesis-endpoint-url",
        kinesis,
        "--dynamodb-endpoint-url",
        dynamodb,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(d) = data_dir {
        args.extend(["--data-dir".to_owned(), d.display().to_string()]);
    }
    args
}

/// The local peers' endpoints: `TEST_KINESIS_ENDPOINT` and `TEST_DYNAMODB_ENDPOINT` (set by
/// `scripts/local-aws.sh env`), else their default ports on 127.0.0.1.
pub fn peers() -> (String, String) {
    let peer = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    (
        peer("TEST_KINESIS_ENDPOINT", "http://127.0.0.1:4568"),
        peer("TEST_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"),
    )
}
