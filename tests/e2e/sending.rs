//! docs/SENDING-LIKES.md's examples, run as a team whose producer is not tally's would run them
//! — boto3 (`examples/send_likes.py`) and the AWS CLI (`examples/send-likes.sh`), installed from
//! PyPI by scripts/with-aws-tools.sh — against kinesis-local, and against the embedded default
//! through `tally ingest` (the same code, only the endpoint URL and the secret apart), and
//! counted exactly: what users did
//! to like buttons (double taps, toggles, unlikes of nothing, a retried action, a hot post spread
//! by user) ends as each user's latest action.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;

use crate::common::{file_in, now_ms, output, Bg, Target};

on_backends! {
    boto3_producer_is_counted_exactly {
        embedded => sent_and_counted(Target::embedded(), Sender::Boto3),
        aws => sent_and_counted(Target::aws("boto3", 2), Sender::Boto3),
    }
}

on_backends! {
    aws_cli_producer_is_counted_exactly {
        embedded => sent_and_counted(Target::embedded(), Sender::Cli),
        aws => sent_and_counted(Target::aws("awscli", 2), Sender::Cli),
    }
}

/// The token `tally ingest` is started with in these tests: the secret access key a producer
/// signs with.
const INGEST_TOKEN: &str = "a-token-of-twenty-chars";

/// Where a producer sends: the stream, its endpoint and the secret access key it signs with;
/// for the embedded default, a `tally ingest` this test started (with a token), kept running.
fn endpoint(t: &Target) -> (String, String, String, Option<Bg>) {
    if t.is_aws() {
        let stream = t.flag("--stream").unwrap();
        let endpoint = t.flag("--kinesis-endpoint-url").unwrap();
        return (stream, endpoint, "test".into(), None);
    }
    let token = file_in(t, "ingest-token");
    std::fs::write(&token, format!("{INGEST_TOKEN}\n")).unwrap();
    let args = ["ingest", "--addr", "127.0.0.1:0", "--auth-token-file"];
    let args: Vec<&str> = args.into_iter().chain([token.to_str().unwrap()]).collect();
    let bg = t.spawn("ingest", &args, &[]);
    let addr = crate::serve::served_addr(&bg);
    let stream = t.json(&["config", "--json"])["stream"]
        .as_str()
        .unwrap()
        .to_owned();
    (
        stream,
        format!("http://{addr}"),
        INGEST_TOKEN.into(),
        Some(bg),
    )
}

/// A producer signing with another secret than `tally ingest`'s token is refused, as Kinesis
/// refuses a wrong secret key, and nothing it sent is counted.
#[test]
fn ingest_refuses_a_producer_without_its_token() {
    let t = Target::embedded();
    let file = file_in(&t, "actions.ndjson");
    write_actions(&file);
    let (stream, endpoint, _, _ingest) = endpoint(&t);
    let out = output(send(
        &file,
        &stream,
        &endpoint,
        "not-the-token-at-all",
        Sender::Boto3,
    ));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("InvalidSignatureException"), "{said}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.json(&["total", "--json"])["total"], 0);
}

#[derive(Clone, Copy)]
enum Sender {
    Boto3,
    Cli,
}

/// Actions on posts by users, with their likers count.
fn write_actions(path: &std::path::Path) -> BTreeMap<String, i64> {
    let mut f = std::fs::File::create(path).unwrap();
    let t0 = now_ms() - 60_000;
    let mut n = 0;
    let mut act = |f: &mut std::fs::File, post: &str, user: &str, action: &str, dt: i64| {
        n += 1;
        writeln!(
            f,
            r#"{{"event_id":"ex-{n}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{}}}"#,
            t0 + dt
        )
        .unwrap();
    };
    // 40 users like the hot post; u0..u9 tap twice; u10..u14 take theirs back.
    for u in 0..40 {
        act(&mut f, "hot", &format!("u{u}"), "like", u);
    }
    for u in 0..10 {
        act(&mut f, "hot", &format!("u{u}"), "like", 100 + u);
    }
    for u in 10..15 {
        act(&mut f, "hot", &format!("u{u}"), "unlike", 200 + u);
    }
    // A calm post: a toggle ending liked, an unlike of nothing, and a retried like (the same
    // event id sent twice).
    act(&mut f, "calm", "a", "like", 1);
    act(&mut f, "calm", "a", "unlike", 2);
    act(&mut f, "calm", "a", "like", 3);
    act(&mut f, "calm", "b", "unlike", 4);
    writeln!(
        f,
        r#"{{"event_id":"ex-retried","post_id":"calm","user_id":"c","action":"like","created_at":{t0}}}"#
    )
    .unwrap();
    writeln!(
        f,
        r#"{{"event_id":"ex-retried","post_id":"calm","user_id":"c","action":"like","created_at":{t0}}}"#
    )
    .unwrap();
    BTreeMap::from([("hot".to_owned(), 35), ("calm".to_owned(), 2)])
}

fn sent_and_counted(t: Target, how: Sender) {
    let file = file_in(&t, "actions.ndjson");
    let want = write_actions(&file);
    let (stream, endpoint, secret, _ingest) = endpoint(&t);
    let out = output(send(&file, &stream, &endpoint, &secret, how));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("sent 61 records"), "{said}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.mismatches(&want), vec![]);
    let page = t.json(&["query", "hot", "calm", "--viewer", "u12", "--json"]);
    assert_eq!(page["counts"][0]["viewer_liked"], false, "{page}");
    let page = t.json(&["query", "hot", "calm", "--viewer", "a", "--json"]);
    assert_eq!(page["counts"][1]["viewer_liked"], true, "{page}");
}

/// The example `how`, sending `file` to `stream` at `endpoint`, signed with `secret`.
fn send(
    file: &std::path::Path,
    stream: &str,
    endpoint: &str,
    secret: &str,
    how: Sender,
) -> Command {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Command::new(root.join("scripts/with-aws-tools.sh"));
    match how {
        Sender::Boto3 => {
            c.arg("python3")
                .arg(root.join("examples/send_likes.py"))
                .args(["--stream", stream, "--endpoint-url", endpoint])
                .args(["--hot", "hot", "--hot-keys", "4"])
                .arg(file);
        }
        Sender::Cli => {
            c.arg(root.join("examples/send-likes.sh"))
                .arg(stream)
                .arg(file)
                .env("AWS_ENDPOINT_URL", endpoint);
        }
    }
    c.env("AWS_ACCESS_KEY_ID", "tally")
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("AWS_PROFILE");
    c
}

/// docs/SENDING-LIKES.md's request path: `examples/like_api.py`, a like button's handler, puts
/// each tap with one PutRecord (through `tally ingest`, signed with its token) and answers after
/// the stream took it; a tap sent again with its event id changes nothing; a body that is not a
/// tap is a 400; and when the stream is gone the handler answers 503 with Retry-After, so the
/// app keeps the tap. Every count exact.
#[test]
fn a_request_handler_puts_each_tap() {
    use std::io::BufRead;
    let t = Target::embedded();
    let (stream, endpoint, secret, ingest) = endpoint(&t);
    let mut ingest = ingest.unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut api = Command::new(root.join("scripts/with-aws-tools.sh"))
        .arg("python3")
        .arg(root.join("examples/like_api.py"))
        .args([
            "--stream",
            &stream,
            "--endpoint-url",
            &endpoint,
            "--port",
            "0",
        ])
        .env("AWS_ACCESS_KEY_ID", "tally")
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            self.0.kill().ok();
            self.0.wait().ok();
        }
    }
    let mut line = String::new();
    std::io::BufReader::new(api.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _api = Kill(api);
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("the like API did not start: {line:?}"))
        .to_owned();
    let tap = |body: &str| {
        crate::serve::request_with(&addr, "POST", "/likes", Some(body), &[])
            .map(|(status, _, body)| (status, body))
            .expect("an answer")
    };
    let t0 = now_ms() - 10_000;
    let taps = [
        ("p-api", "u1", "like", "tap-1", 1),
        ("p-api", "u2", "like", "tap-2", 2),
        ("p-api", "u2", "like", "tap-3", 3),   // a double tap
        ("p-api", "u3", "unlike", "tap-4", 4), // an unlike of nothing
        ("p-api", "u1", "unlike", "tap-5", 5),
        ("p-api", "u1", "like", "tap-6", 6),
        ("p-api", "u4", "like", "tap-7", 7),
        ("p-api", "u4", "like", "tap-7", 7), // the same tap sent again
    ];
    for (post, user, action, id, dt) in taps {
        let (status, body) = tap(&format!(
            r#"{{"post_id":"{post}","user_id":"{user}","action":"{action}","event_id":"{id}","created_at":{}}}"#,
            t0 + dt
        ));
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("sequence_number"), "{body}");
    }
    let (status, body) = tap(r#"{"post_id":"p-api","user_id":"u9","action":"love"}"#);
    assert_eq!(status, 400, "{body}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.count("p-api"), 3, "u1, u2 and u4 like it");

    // The stream gone: the tap is refused with Retry-After, not lost silently.
    ingest.child.kill().unwrap();
    ingest.child.wait().unwrap();
    let answer = crate::serve::request_with(
        &addr,
        "POST",
        "/likes",
        Some(r#"{"post_id":"p-api","user_id":"u5","action":"like","event_id":"tap-8"}"#),
        &[],
    )
    .expect("an answer");
    assert_eq!(answer.0, 503, "{answer:?}");
    assert!(answer.1.contains("retry-after: 1"), "{answer:?}");
}

/// docs/SENDING-LIKES.md's first day, as written: `tally ingest` with a token, the sample file
/// `examples/actions.ndjson` sent by `examples/send_likes.py` signed with it, `tally count`, and
/// the counts the page says (p1: alice and bob — bob's double tap once, carol's unlike of nothing
/// nothing; p2: dave, sent twice — alice took hers back).
#[test]
fn the_first_day_path_counts_the_sample_file() {
    let t = Target::embedded();
    let (stream, endpoint, secret, _ingest) = endpoint(&t);
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/actions.ndjson");
    let out = output(send(&sample, &stream, &endpoint, &secret, Sender::Boto3));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("sent 8 records"), "{said}");
    t.run(&["count", "--until-idle"]);
    let want = BTreeMap::from([("p1".to_owned(), 2), ("p2".to_owned(), 1)]);
    assert_eq!(t.mismatches(&want), vec![]);
}

/// `tally up`, the whole embedded default in one process: the sample file sent to its ingest
/// endpoint by `examples/send_likes.py` (signed with the token) shows on its read API (with the
/// same token) without any other command, each count as the page says; SIGTERM stops it cleanly.
#[test]
fn tally_up_takes_likes_and_answers_them() {
    let t = Target::embedded();
    let token = file_in(&t, "token");
    std::fs::write(&token, format!("{INGEST_TOKEN}\n")).unwrap();
    let args = [
        "up",
        "--ingest-addr",
        "127.0.0.1:0",
        "--addr",
        "127.0.0.1:0",
        "--auth-token-file",
    ];
    let args: Vec<&str> = args.into_iter().chain([token.to_str().unwrap()]).collect();
    let mut up = t.spawn("up", &args, &[]);
    let addr_of = |what: &str| {
        let started = std::time::Instant::now();
        loop {
            let log = up.log_text();
            if let Some(rest) = log.split(what).nth(1) {
                return rest.split('/').nth(2).unwrap().to_owned();
            }
            assert!(
                started.elapsed().as_secs() < 30,
                "tally up did not start:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let (ingest, api) = (
        addr_of("up: ingest (Kinesis API) on "),
        addr_of("up: read API and dashboard on "),
    );
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/actions.ndjson");
    let endpoint = format!("http://{ingest}");
    let out = output(send(
        &sample,
        "tally-likes",
        &endpoint,
        INGEST_TOKEN,
        Sender::Boto3,
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bearer = format!("Bearer {INGEST_TOKEN}");
    t.eventually(
        "the sample's counts on the read API",
        std::time::Duration::from_secs(30),
        &[&up],
        || {
            let answer = crate::serve::request_with(
                &api,
                "GET",
                "/api/counts?ids=p1,p2&viewer=bob",
                None,
                &[("Authorization", &bearer)],
            );
            let Some((200, _, body)) = answer else {
                return false;
            };
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            v["counts"][0]["count"] == 2
                && v["counts"][1]["count"] == 1
                && v["counts"][0]["viewer_liked"] == true
        },
    );
    up.signal("TERM");
    assert!(
        up.wait(std::time::Duration::from_secs(30)).success(),
        "{}",
        up.log_text()
    );
    // Where it listens is said once, in its own words: no unexplained "serving on" lines (the
    // counter's endpoint for the read API is internal).
    assert!(!up.log_text().contains("serving on"), "{}", up.log_text());
    assert_eq!(
        t.mismatches(&BTreeMap::from([
            ("p1".to_owned(), 2),
            ("p2".to_owned(), 1)
        ])),
        vec![]
    );
}

/// A producer's health check against `tally ingest`: `aws kinesis describe-stream-summary`
/// answers the embedded stream active with its open shards; another stream's name is
/// `ResourceNotFoundException`, as Kinesis says it.
#[test]
fn ingest_describes_its_stream() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "3"]);
    let (stream, endpoint, secret, _ingest) = endpoint(&t);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let describe = |name: &str| {
        let mut c = Command::new(root.join("scripts/with-aws-tools.sh"));
        c.args([
            "aws",
            "kinesis",
            "describe-stream-summary",
            "--output",
            "json",
        ])
        .args(["--endpoint-url", &endpoint, "--stream-name", name])
        .env("AWS_ACCESS_KEY_ID", "tally")
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("AWS_PROFILE");
        output(c)
    };
    let out = describe(&stream);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["StreamDescriptionSummary"];
    assert_eq!(
        (s["StreamStatus"].as_str(), s["OpenShardCount"].as_u64()),
        (Some("ACTIVE"), Some(3)),
        "{v}"
    );
    let out = describe("no-such-stream");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ResourceNotFoundException"));
}

/// `tally up` whose counter cannot count (its store claimed by another stream) exits with the
/// counter's error instead of serving a pipeline in which nothing counts.
#[test]
fn tally_up_stops_when_a_part_stops() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    t.run(&["count", "--until-idle"]);
    let args = [
        "--stream",
        "another-stream",
        "up",
        "--ingest-addr",
        "127.0.0.1:0",
        "--addr",
        "127.0.0.1:0",
    ];
    let mut up = t.spawn("up", &args, &[]);
    let status = up.wait(std::time::Duration::from_secs(30));
    let log = up.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("the counter stopped") && log.contains("counted from stream"),
        "{log}"
    );
}
