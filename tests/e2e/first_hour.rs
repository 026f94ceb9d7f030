//! What a new user meets in the first hour, on the embedded backend: reads that never create a
//! store, a demo that never touches one with data, replays of files as exporters write them,
//! "since" answered with the bound actually used, `--until-idle` that says what it waits for and
//! can be bounded, and input checked before it is used.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{now_ms, Target};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One like line of contract v1.
fn like(event: &str, post: &str, user: &str, created_at: i64) -> String {
    format!(
        r#"{{"event_id":"{event}","post_id":"{post}","user_id":"{user}","action":"like","created_at":{created_at}}}"#
    )
}

#[test]
fn reads_never_create_a_store() {
    let t = Target::embedded();
    let missing = t.dir.path().join("mistyped");
    let dir = missing.to_str().unwrap();
    for args in [
        vec!["query", "p1"],
        vec!["total"],
        vec!["top"],
        vec!["latency"],
        vec!["leases"],
        vec!["dead-letters"],
        vec!["record", "out.ndjson"],
        vec!["trim", "--older-than", "1d"],
        vec!["reshard", "--split", "shardId-000000000000"],
    ] {
        let mut c = std::process::Command::new(crate::common::tally_bin());
        c.args(&args)
            .args(["--data-dir", dir])
            .current_dir(t.dir.path());
        let out = crate::common::output(c);
        assert!(
            !out.status.success(),
            "{args:?} succeeded on a missing store"
        );
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{dir}/tally.db does not exist")) && err.contains("--data-dir"),
            "{args:?}: {err}"
        );
        assert!(!missing.exists(), "{args:?} created {dir}");
    }
}

/// A store on a read-only filesystem (a bind mount made read-only in a private mount namespace,
/// as `unshare` gives an unprivileged user) is read; writers say it is read-only; a store an
/// earlier build made is refused there as anywhere.
#[test]
fn a_store_on_a_read_only_filesystem_is_read() {
    let unshare_works = std::process::Command::new("unshare")
        .args(["-rm", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        eprintln!("skipped: `unshare -rm` (user and mount namespaces) is not available here");
        return;
    }
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let file = t.dir.path().join("likes.ndjson");
    let now = now_ms();
    let lines: Vec<String> = (0..10)
        .map(|i| like(&format!("e{i}"), "p1", &format!("u{i}"), now))
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let dir = t.dir.path().display().to_string();
    let bin = crate::common::tally_bin();
    let bin = bin.to_string_lossy();
    let in_read_only = |cmd: &str| {
        let script = format!("mount -o bind,ro {dir} {dir} && {bin} --data-dir {dir} {cmd}");
        let mut c = std::process::Command::new("unshare");
        c.args(["-rm", "sh", "-c", &script]).env("RUST_LOG", "warn");
        crate::common::output(c)
    };
    let out = in_read_only("query p1 --json");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["counts"][0]["count"], 10, "{v}");
    let out = in_read_only("total");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("10 likes"),
        "{}",
        stderr(&out)
    );
    let out = in_read_only("count --until-idle");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is read-only"), "{}", stderr(&out));
    // The viewer's likes come from the edges' own files, read-only too.
    let viewer = || in_read_only("query p1 --viewer u3 --json");
    let out = viewer();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["counts"][0]["count"].as_i64(),
            v["counts"][0]["viewer_liked"].as_bool()
        ),
        (Some(10), Some(true)),
        "{v}"
    );
    // A store an earlier build made keeps its edges in `tally.db`, without their change log:
    // read-only too it is refused with what to do, never read as if it were this build's, and
    // left as it was.
    let db = rusqlite::Connection::open(t.dir.path().join("tally.db")).unwrap();
    let parts = tally_embedded::edge_files(t.dir.path()).unwrap();
    assert!(!parts.is_empty());
    db.execute("ATTACH DATABASE ?1 AS e", [parts[0].display().to_string()])
        .unwrap();
    db.execute_batch("CREATE TABLE main.edges AS SELECT * FROM e.edges; DETACH DATABASE e")
        .unwrap();
    drop(db);
    let out = viewer();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("made by an earlier build of tally") && err.contains("fresh --data-dir"),
        "{err}"
    );
    let db = rusqlite::Connection::open(t.dir.path().join("tally.db")).unwrap();
    let kept: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'edges'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 1, "a read-only store is not changed");
    assert!(
        parts.iter().all(|p| p.exists()),
        "nor its edges' files moved"
    );
}

#[test]
fn the_demo_never_touches_a_store_with_data() {
    let t = Target::embedded();
    t.run(&["produce", "--events", "50"]);
    let before = t.json(&["leases", "--json"]);
    let total = t.run(&["total"]);
    let out = t.fail(&["demo", "--events", "100"], &[]);
    let err = stderr(&out);
    assert!(
        err.contains("already holds a tally store with data") && err.contains("--data-dir"),
        "{err}"
    );
    assert_eq!(t.run(&["total"]), total);
    assert_eq!(t.json(&["leases", "--json"]), before);
    // An empty store is fine.
    let fresh = Target::embedded();
    fresh.run(&["setup", "--shards", "2"]);
    let v = fresh.json(&["demo", "--events", "300", "--shards", "2", "--json"]);
    assert_eq!(v["exact"], true, "{v}");
}

/// A leading UTF-8 byte-order mark is stripped (the first like is counted, not dead-lettered),
/// blank lines are counted and reported, and `-` reads standard input (gzip too).
#[test]
fn replay_reads_files_as_exporters_write_them() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let now = now_ms();
    let mut text = Vec::from(&b"\xEF\xBB\xBF"[..]);
    text.extend(like("e1", "p1", "u1", now).as_bytes());
    text.extend(b"\r\n\n   \r\n");
    text.extend(like("e2", "p1", "u2", now).as_bytes());
    text.extend(b"\n\n");
    let file = t.dir.path().join("exported.ndjson");
    std::fs::write(&file, &text).unwrap();
    let v = t.json(&["replay", file.to_str().unwrap(), "--json"]);
    assert_eq!(
        (v["records"].as_u64(), v["blank_lines"].as_u64()),
        (Some(2), Some(3)),
        "{v}"
    );

    // The same again through standard input, gzip-compressed: the same events, so a retry.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let mut c = t.cmd(&["replay", "-", "--json"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(&gz).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["records"], 2, "{v}");

    t.run(&["count", "--until-idle"]);
    assert_eq!(t.count("p1"), 2);
    assert_eq!(t.json(&["dead-letters", "--json"])["total"], 0);
}

/// `tally replay -` puts each line as it comes: a producer writing to a pipe that stays open has
/// each like counted while it writes — the first line is counted before the second is written —
/// and the replay ends when the pipe closes, having put each line once.
#[test]
fn replay_from_a_pipe_puts_each_line_as_it_comes() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let now = now_ms();
    let mut c = t.cmd(&["replay", "-", "--json"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    for (i, user) in ["u1", "u2", "u3"].iter().enumerate() {
        writeln!(pipe, "{}", like(&format!("live-{i}"), "p-live", user, now)).unwrap();
        pipe.flush().unwrap();
        let started = std::time::Instant::now();
        loop {
            t.run(&["count", "--until-idle"]);
            if t.count("p-live") == i as i64 + 1 {
                break;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "line {} written and not counted while the pipe is open",
                i + 1
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the replay ended early"
        );
    }
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["records"], 3, "{v}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.count("p-live"), 3);
}

/// Counts are kept per minute: "since T" counts from the start of T's minute, and the answer
/// says so — the bound used, and the time asked for.
#[test]
fn since_reports_the_bound_it_used() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let now = now_ms();
    let minute = 60_000;
    // Likes at 3 h, 90 min, 30 min and 1 min ago.
    let lines: Vec<String> = [180, 90, 30, 1]
        .iter()
        .enumerate()
        .map(|(i, m)| like(&format!("e{i}"), "p1", &format!("u{i}"), now - m * minute))
        .collect();
    let file = t.dir.path().join("likes.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let v = t.query_one(&["query", "p1", "--since", "1h", "--json"]);
    let (bound, asked) = (
        v["since_ms"].as_i64().unwrap(),
        v["since_requested_ms"].as_i64().unwrap(),
    );
    assert_eq!(bound % minute, 0, "{v}");
    assert!(bound <= asked && asked - bound < minute, "{v}");
    assert!((asked - (now - 60 * minute)).abs() < 60_000, "{v}");
    assert_eq!(
        (v["count"].as_i64(), v["count_since"].as_i64()),
        (Some(4), Some(2)),
        "{v}"
    );
    let text = t.run(&["query", "p1", "--since", "2h"]);
    assert!(
        text.contains("p1: 4 likes (+3 net") && text.contains("the start of the minute 2h ago"),
        "{text}"
    );
    let err = stderr(&t.fail(&["query", "p1", "--since", "0s"], &[]));
    assert!(
        err.contains("'--since <SINCE>': must be longer than 0"),
        "{err}"
    );
    // A time instead of a duration: RFC 3339 or epoch milliseconds, the same bound as "1h".
    let hour_ago = now_ms() - 60 * minute;
    let rfc3339 = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + Duration::from_millis(hour_ago as u64),
    )
    .to_string();
    for since in [rfc3339.as_str(), &hour_ago.to_string()] {
        let v = t.query_one(&["query", "p1", "--since", since, "--json"]);
        assert_eq!(v["count_since"].as_i64(), Some(2), "{since}: {v}");
        assert!(
            (v["since_requested_ms"].as_i64().unwrap() - hour_ago).abs() < 5_000,
            "{v}"
        );
    }
    let err = stderr(&t.fail(&["query", "p1", "--since", "100y"], &[]));
    assert!(err.contains("is before 1970-01-01T00:00:00Z"), "{err}");
    let err = stderr(&t.fail(&["query", "p1", "--since", "2999-01-01T00:00:00Z"], &[]));
    assert!(err.contains("is not in the past"), "{err}");
}

/// `--until-idle` beside a worker that holds some shards says what it waits for, and
/// `--timeout` bounds the wait: exit status 2, naming the shards and their holder; what it read is
/// applied.
#[test]
fn until_idle_says_what_it_waits_for_and_can_be_bounded() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let mut other = t.spawn(
        "other",
        &["count", "--worker-id", "other-worker"],
        &[
            ("TALLY_LEASE__MAX_PER_WORKER", "1"),
            ("TALLY_LEASE__DURATION_MS", "60000"),
        ],
    );
    t.eventually(
        "the other worker holds a lease",
        Duration::from_secs(30),
        &[&other],
        || {
            t.json(&["leases", "--json"])
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["owner"] == "other-worker" && l["held"] == true)
        },
    );
    // A worker that holds a shard and says nothing since the exit was armed (here: stopped, its
    // lease still valid) is waited for; one that reports its shard at the tip is not (below).
    other.signal("STOP");
    let mut c = t.cmd(&[
        "count",
        "--until-idle",
        "--timeout",
        "8s",
        "--worker-id",
        "me",
    ]);
    c.env("RUST_LOG", "info").env("NO_COLOR", "1");
    let out = crate::common::output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("waiting until every shard is caught up")
            && err.contains("held by other-worker"),
        "{err}"
    );
    assert!(
        err.contains(
            "not caught up after 8s (--timeout): other workers hold the leases of shardId-"
        ) && err.contains("(held by other-worker)"),
        "{err}"
    );
    other.signal("CONT");
    // The other worker live again and at its tip: the same command ends (it reports within a
    // renewal).
    t.run(&[
        "count",
        "--until-idle",
        "--timeout",
        "60s",
        "--worker-id",
        "me",
    ]);
    other.signal("TERM");
    assert!(other.wait(Duration::from_secs(60)).success());
    // With the other worker gone, the same command is idle at once.
    t.run(&["count", "--until-idle", "--timeout", "60s"]);
    // A timeout is a duration longer than 0, said as `--since` says it.
    for (bad, says) in [
        ("0s", "must be longer than 0"),
        ("abc", "must be a duration like 30s or 5m"),
    ] {
        let err = stderr(&t.fail(&["count", "--until-idle", "--timeout", bad], &[]));
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn input_is_checked_before_it_is_used() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "4"]);
    let err = stderr(&t.fail(&["setup", "--shards", "8"], &[]));
    assert!(err.contains("already exists with 4 open shards"), "{err}");
    t.run(&["setup", "--shards", "4"]);
    t.run(&["setup"]);
    let err = stderr(&t.fail(&["query", "bad id!"], &[]));
    assert!(err.contains("\"bad id!\" is not a post id"), "{err}");
}

/// `--help` has examples and keeps the global flags apart; completions and a man page are
/// generated from the same definition; `--log-level` sets how much is logged.
#[test]
fn help_completions_man_page_and_log_level() {
    let t = Target::embedded();
    let help = t.run(&["--help"]);
    assert!(
        help.contains("Examples:") && help.contains("Global options:"),
        "{help}"
    );
    assert!(
        help.contains("Runs embedded on one machine by default"),
        "{help}"
    );
    let query = t.run(&["query", "--help"]);
    assert!(
        query.contains("The post's id") && query.contains("Examples:"),
        "{query}"
    );
    let produce = t.run(&["produce", "--help"]);
    assert!(
        produce.contains("[default: 1000]") && produce.contains("Like and unlike events"),
        "{produce}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let script = t.run(&["completions", shell]);
        assert!(
            script.contains("dead-letters")
                && script.contains("since")
                && script.contains("until-idle"),
            "{shell}"
        );
    }
    let man = t.run(&["man"]);
    assert!(
        man.contains(".TH tally 1") && man.contains("dead\\-letters"),
        "{man}"
    );

    t.run(&["setup", "--shards", "1"]);
    t.run(&["produce", "--events", "20"]);
    let logs = |level: &str| {
        let mut c = t.cmd(&["count", "--until-idle", "--log-level", level]);
        c.env("RUST_LOG", "info").env("NO_COLOR", "1");
        let out = crate::common::output(c);
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    assert!(logs("debug").contains(" DEBUG "));
    assert!(
        !logs("warn").contains(" INFO "),
        "--log-level beats RUST_LOG"
    );
    let out = t.fail(&["total", "--log-level", "loud=very=much"], &[]);
    assert!(stderr(&out).contains("--log-level"), "{}", stderr(&out));
}

/// Reading commands check their input and say when there is nothing to show.
#[test]
fn reading_commands_check_input_and_say_when_empty() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let err = stderr(&t.fail(&["top", "--k", "0"], &[]));
    assert!(err.contains("--k") && err.contains("1..=1000"), "{err}");
    let err = stderr(&t.fail(&["leases", "--app", "countr"], &[]));
    assert!(
        err.contains("possible values: counter, changes, analytics"),
        "{err}"
    );
    let latency = t.run(&["latency"]);
    assert!(latency.contains("no latency data yet"), "{latency}");
    assert_eq!(t.json(&["latency", "--json"])["windows"], 0);
}

/// A dead letter's payload never reaches the terminal raw (escape sequences, bells); the JSON
/// says how many there are and whether the list was cut.
#[test]
fn dead_letters_are_safe_to_print() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let file = t.dir.path().join("bad.ndjson");
    std::fs::write(
        &file,
        "{\"x\":\"\x1b[31mred\x07\"}\n\x1b]0;title\x07\n{bad\n",
    )
    .unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let text = t.run(&["dead-letters"]);
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(text.contains("\\u{1b}[31mred\\u{7}"), "{text}");
    let v = t.json(&["dead-letters", "--json", "--limit", "2"]);
    assert_eq!(
        (
            v["total"].as_u64(),
            v["shown"].as_u64(),
            v["truncated"].as_bool()
        ),
        (Some(3), Some(2), Some(true)),
        "{v}"
    );
    let text = t.run(&["dead-letters", "--limit", "1"]);
    assert!(text.contains("… 2 more"), "{text}");
}

/// Configuration errors list what is valid and name where the bad value came from; `config`
/// prints JSON too and keeps the test failpoint out of sight unless it is set.
#[test]
fn configuration_errors_say_what_is_valid_and_where() {
    let t = Target::embedded();
    let err = stderr(&t.fail(&["total"], &[("TALLY_BACKEND", "azure")]));
    assert!(
        err.contains("expected one of `embedded`, `aws`, got `azure`"),
        "{err}"
    );
    assert!(!err.contains("BackendKind"), "{err}");
    let cfg = t.dir.path().join("tally.toml");
    std::fs::write(&cfg, "shards = 2\n[counter]\nwindw_ms = 5\n").unwrap();
    let err = stderr(&t.fail(&["--config", cfg.to_str().unwrap(), "total"], &[]));
    assert!(
        err.contains("tally.toml")
            && err.contains("line 3")
            && err.contains("unknown field `windw_ms`"),
        "{err}"
    );
    std::fs::write(&cfg, "counter = 5\n").unwrap();
    let err = stderr(&t.fail(&["--config", cfg.to_str().unwrap(), "total"], &[]));
    assert!(
        err.contains("expected a table") && !err.contains("CounterConfig"),
        "{err}"
    );
    let err = stderr(&t.fail(&["total"], &[("TALLY_COUNTER__WINDW_MS", "5")]));
    assert!(
        err.contains("TALLY_COUNTER__WINDW_MS") && err.contains("`counter` has no key `windw_ms`"),
        "{err}"
    );

    let v = t.json(&["config", "--json"]);
    assert_eq!(v["shards"], 4, "{v}");
    // The tests' failpoint is no setting: no key lists it, and a config file cannot set it.
    assert!(v["counter"].get("crash_after_batches").is_none(), "{v}");
    assert!(!t.run(&["config"]).contains("crash_after_batches"));
    let v = t.json_env(
        &["config", "--json"],
        &[("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "3")],
    );
    assert!(v["counter"].get("crash_after_batches").is_none(), "{v}");
    let err = stderr(&t.fail(&["total"], &[("TALLY_COUNTER__CRASH_AFTER_BATCHES", "3")]));
    assert!(
        err.contains("`counter` has no key `crash_after_batches`"),
        "{err}"
    );
    assert!(
        !err.contains("crash_after_batches`,") && !err.contains("crash_after_batches,"),
        "{err}"
    );
}

/// AWS set-up problems are one line each, with the cause: no region, no credentials, an
/// endpoint that does not answer. (Nothing leaves 127.0.0.1: instance metadata is off and the
/// profile files are empty.)
#[test]
fn aws_setup_problems_are_one_clear_line() {
    let t = Target::aws_at("errs", "http://127.0.0.1:1", "http://127.0.0.1:1");
    let empty = t.dir.path().join("empty-aws-profile");
    std::fs::write(&empty, "").unwrap();
    let run = |env: &[(&str, Option<&str>)]| {
        let mut c = t.cmd(&["total"]);
        c.env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", &empty)
            .env("AWS_SHARED_CREDENTIALS_FILE", &empty)
            .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            .env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_PROFILE")
            .env_remove("RUST_LOG");
        for (k, v) in env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let out = crate::common::output(c);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.len() < 400, "{err}");
        err
    };
    let err = run(&[("AWS_REGION", None)]);
    assert!(
        err.contains("no AWS region configured: set AWS_REGION"),
        "{err}"
    );
    let err = run(&[("AWS_ACCESS_KEY_ID", None), ("AWS_SECRET_ACCESS_KEY", None)]);
    assert!(
        err.contains("no AWS credentials found") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );
    let err = run(&[]);
    assert!(
        err.contains("could not reach Kinesis endpoint http://127.0.0.1:1 (DescribeStreamSummary)")
            && err.contains("Connection refused"),
        "{err}"
    );
}

/// A worker's `--http` address already in use stops it at start, naming the address, instead of
/// running on without the endpoint its container's health check probes.
#[test]
fn a_worker_s_http_address_in_use_stops_it_at_start() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for app in ["count", "analytics"] {
        let out = t.fail(&[app, "--until-idle", "--http", &addr], &[]);
        assert_eq!(out.status.code(), Some(1), "{app}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("binding {addr} for HTTP")),
            "{app}: {err}"
        );
    }
}

/// Flags a new user gets wrong are refused or taken as meant: `--log-level verbose` is no level
/// (it used to turn logging off), `--addr` takes a host name, `top` has `-k`.
#[test]
fn flags_say_what_they_take() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let out = t.fail(&["--log-level", "verbose", "total"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("\"verbose\" is not a level") && err.contains("debug"),
        "{err}"
    );
    t.run(&["--log-level", "debug", "total"]);
    t.run(&["--log-level", "warn,tally_consumer=debug", "total"]);
    assert!(!t.run(&["top", "-k", "3"]).is_empty());
    let err = stderr(&t.fail(&["serve", "--addr", "localhost"], &[]));
    assert!(err.contains("HOST:PORT"), "{err}");
    let mut serve = t.cmd(&["serve", "--addr", "localhost:0"]);
    serve.stderr(Stdio::piped());
    let mut child = serve.spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = String::new();
    let start = std::time::Instant::now();
    let served = |s: &str| {
        s.split("serving on http://")
            .nth(1)
            .is_some_and(|r| r.contains('/'))
    };
    while !served(&seen) && start.elapsed() < Duration::from_secs(20) {
        let mut buf = [0u8; 256];
        match std::io::Read::read(&mut err, &mut buf) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading serve's stderr: {e}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    let status = child.try_wait().ok().flatten();
    child.kill().ok();
    child.wait().ok();
    assert!(
        seen.contains("serving on http://127.0.0.1:"),
        "{seen:?} {status:?}"
    );
}

/// `tally record -` writes the stream to standard output, so that `record - | replay -` copies a
/// stream; its summary goes to stderr and no file named `-` appears.
#[test]
fn record_to_standard_output_pipes_into_replay() {
    let (a, b) = (Target::embedded(), Target::embedded());
    a.run(&["setup", "--shards", "2"]);
    b.run(&["setup", "--shards", "2"]);
    let path = a.dir.path().join("likes.ndjson");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..50 {
        writeln!(
            f,
            "{}",
            like(
                &format!("e{i}"),
                &format!("p{}", i % 5),
                &format!("u{i}"),
                now_ms()
            )
        )
        .unwrap();
    }
    drop(f);
    a.run(&["replay", path.to_str().unwrap()]);
    let out = crate::common::output(a.cmd(&["record", "-"]));
    assert!(out.status.success(), "{}", stderr(&out));
    // A header, then one line per record.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 51);
    assert!(stderr(&out).contains("recorded 50 records of 2 shards to standard output"));
    assert!(!std::env::current_dir().unwrap().join("-").exists());
    let mut replay = b.cmd(&["replay", "-"]);
    replay.stdin(Stdio::piped());
    let mut child = replay.stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    assert!(child.wait().unwrap().success());
    b.run(&["count", "--until-idle"]);
    assert_eq!(b.json(&["total", "--json"])["total"], 50);
}

/// `replay` of a file that is not there (or is a directory) fails naming it and creates nothing;
/// a writer that does create a store says where.
#[test]
fn replay_checks_its_file_before_creating_anything() {
    let t = Target::embedded();
    let db = t.dir.path().join("tally.db");
    let missing = t.dir.path().join("missing.ndjson");
    let err = stderr(&t.fail(&["replay", missing.to_str().unwrap()], &[]));
    assert!(
        err.contains("cannot read") && err.contains("missing.ndjson"),
        "{err}"
    );
    assert!(!db.exists(), "no store was created");
    let err = stderr(&t.fail(&["replay", t.dir.path().to_str().unwrap()], &[]));
    assert!(
        err.contains("is a directory: expected an NDJSON file"),
        "{err}"
    );
    assert!(!db.exists());
    let path = t.dir.path().join("one.ndjson");
    std::fs::write(&path, format!("{}\n", like("e1", "p1", "u1", now_ms()))).unwrap();
    let out = crate::common::output(t.cmd(&["replay", path.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("created a new store at"),
        "{}",
        stderr(&out)
    );
    assert!(db.exists());
    let out = crate::common::output(t.cmd(&["replay", path.to_str().unwrap()]));
    assert!(!stderr(&out).contains("created a new store"), "only once");
}

/// `--config` names what it was given: `/dev/null` is an empty configuration, a directory is no
/// file, and a file's unknown key is "invalid configuration", not a parser's jargon.
#[test]
fn config_files_are_read_as_given() {
    let t = Target::embedded();
    let v = t.json(&["--config", "/dev/null", "config", "--json"]);
    assert_eq!(v["backend"], "embedded", "{v}");
    let dir = t.dir.path().to_str().unwrap().to_owned();
    let err = stderr(&t.fail(&["--config", &dir, "config"], &[]));
    assert!(
        err.contains("is a directory: expected a TOML file"),
        "{err}"
    );
    let f = t.dir.path().join("bad.toml");
    std::fs::write(&f, "[counter]\nwindw_ms = 5\n").unwrap();
    let err = stderr(&t.fail(&["--config", f.to_str().unwrap(), "config"], &[]));
    assert!(
        err.contains("bad.toml at line 2, column 1") && !err.contains("TOML parse error"),
        "{err}"
    );
}

/// Two `count --until-idle` started together both end: a shard another live worker has read to
/// its tip and applied counts as caught up (it used to wait for that worker to stop, for ever).
#[test]
fn two_until_idle_workers_both_end() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "4"]);
    let path = t.dir.path().join("likes.ndjson");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..400 {
        writeln!(
            f,
            "{}",
            like(
                &format!("e{i}"),
                &format!("p{}", i % 7),
                &format!("u{i}"),
                now_ms()
            )
        )
        .unwrap();
    }
    drop(f);
    t.run(&["replay", path.to_str().unwrap()]);
    let spawn = |id: &str| {
        let mut c = t.cmd(&[
            "count",
            "--until-idle",
            "--timeout",
            "60s",
            "--worker-id",
            id,
        ]);
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    for (name, child) in [("a", a), ("b", b)] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(t.json(&["total", "--json"])["total"], 400);
}

/// A thousand-shard store: `setup` takes more than a thousand shards (no cap of ours), and
/// `tally leases` stays readable — a summary per state and worker — with `--all` for every row.
#[test]
fn leases_summarize_a_large_fleet() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1024"]);
    // Lease rows are a worker's to create: one pass over the empty shards.
    t.run(&["count", "--until-idle", "--worker-id", "big"]);
    let text = t.run(&["leases"]);
    assert!(
        text.starts_with("1024 leases: 0 held, 1024 free or expired, 0 finished"),
        "{text}"
    );
    assert!(text.lines().count() < 10, "{text}");
    let all = t.run(&["leases", "--all"]);
    assert_eq!(all.lines().count(), 1 + 1024, "a header and every row");
    let small = Target::embedded();
    small.run(&["setup", "--shards", "3"]);
    small.run(&["count", "--until-idle"]);
    assert_eq!(
        small.run(&["leases"]).lines().count(),
        1 + 3,
        "few rows are listed"
    );
}

/// Ctrl-C in `produce` stops it between batches: it says how much it put, exits 130, and its
/// `--truth` file covers exactly what was put (the counts prove it). `replay` likewise.
#[test]
fn an_interrupted_producer_says_what_it_put_and_its_truth_holds() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let truth = t.dir.path().join("truth.json");
    let mut p = t.spawn(
        "produce",
        &[
            "produce",
            "--events",
            "1000000",
            "--rate",
            "3000",
            "--posts",
            "50",
            "--truth",
            truth.to_str().unwrap(),
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(1_500));
    p.signal("INT");
    let status = p.wait(Duration::from_secs(30));
    let log = p.log_text();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("interrupted by a signal: put "), "{log}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    let expected: std::collections::BTreeMap<String, i64> =
        serde_json::from_value(v["counts"].clone()).unwrap();
    assert!(
        !expected.is_empty() && v["events"].as_u64().unwrap() < 1_000_000,
        "{v}"
    );
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.mismatches(&expected), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], v["total"]);
}

/// Errors name their subject: a directory given to `replay`, a data dir that is a file, and a
/// store that is not one.
#[test]
fn errors_name_the_path_and_what_was_expected() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let dir = t.dir.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let err = stderr(&t.fail(&["replay", dir.to_str().unwrap()], &[]));
    assert!(
        err.contains("a-directory is a directory: expected an NDJSON file"),
        "{err}"
    );
    let tally = |data_dir: &std::path::Path, args: &[&str]| {
        std::process::Command::new(crate::common::tally_bin())
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .output()
            .unwrap()
    };
    let file = t.dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let out = tally(&file, &["setup"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("a-file is a file, not a directory"), "{err}");
    let corrupt = t.dir.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    std::fs::write(corrupt.join("tally.db"), vec![b'x'; 8192]).unwrap();
    for args in [&["setup"][..], &["total"][..]] {
        let out = tally(&corrupt, args);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains("tally.db is not a tally store"),
            "{args:?}: {err}"
        );
    }
}

/// An empty `count --until-idle` at the default log level says a few sentences a person reads:
/// no module paths, no sentinel numbers, no empty fields; and its summary adds up.
#[test]
fn default_logs_are_a_few_sentences() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "4"]);
    let mut c = t.cmd(&["count", "--until-idle"]);
    c.env_remove("RUST_LOG");
    let out = crate::common::output(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    // Two workers, each naming its app: the stream's (app `counter`, four shards) and the
    // edges' change log's (app `changes`, a shard per edges file: two). Each says a lease taken
    // per shard, "caught up" and its lease stats; then the summary.
    let (stream_shards, log_shards) = (4, 2);
    assert!(
        lines.len() <= stream_shards + log_shards + 2 * 2 + 1,
        "{err}"
    );
    for app in ["counter", "changes"] {
        assert!(err.contains(&format!("app={app} ")), "{app}: {err}");
    }
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.contains("app=counter") || l.contains("app=changes")),
        "every line but the summary names its worker's app:\n{err}"
    );
    for noise in [
        "tally_consumer::",
        "-9223372036854775808",
        "=\n",
        "= ",
        "not_yet_taken=",
        "shard stats",
    ] {
        assert!(!err.contains(noise), "{noise:?} in:\n{err}");
    }
    assert!(
        err.contains("counter stopped: 0 records read, 0 of them in the 0 windows it applied"),
        "{err}"
    );
}

/// docs/CONFIGURATION.md's sample is the defaults: every key `tally config` prints is in it,
/// with the value tally uses, and it names no key tally does not have.
#[test]
fn the_configuration_sample_is_what_tally_config_prints() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/CONFIGURATION.md"
    ))
    .unwrap();
    let start = page.find("```toml\n").unwrap() + "```toml\n".len();
    let sample: toml::Table = page[start..][..page[start..].find("```").unwrap()]
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(crate::common::tally_bin());
    c.arg("config").current_dir(dir.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("TALLY_") {
            c.env_remove(k);
        }
    }
    let out = crate::common::output(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let effective: toml::Table = String::from_utf8(out.stdout).unwrap().parse().unwrap();
    // Numbers compare as numbers (`rate = 0` is the 0.0 tally prints).
    fn same(a: &toml::Value, b: &toml::Value) -> bool {
        match (a, b) {
            (toml::Value::Integer(x), toml::Value::Float(y))
            | (toml::Value::Float(y), toml::Value::Integer(x)) => (*x as f64) == *y,
            (toml::Value::Table(x), toml::Value::Table(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            _ => a == b,
        }
    }
    for (k, v) in &effective {
        let s = sample
            .get(k)
            .unwrap_or_else(|| panic!("docs/CONFIGURATION.md's sample lacks {k}"));
        if let (toml::Value::Table(e), toml::Value::Table(r)) = (v, s) {
            for (kk, vv) in e {
                let rv = r
                    .get(kk)
                    .unwrap_or_else(|| panic!("docs/CONFIGURATION.md's sample lacks {k}.{kk}"));
                assert!(
                    same(vv, rv),
                    "{k}.{kk}: docs/CONFIGURATION.md says {rv}, tally uses {vv}"
                );
            }
        }
        assert!(
            same(v, s),
            "{k}: docs/CONFIGURATION.md says {s}, tally uses {v}"
        );
    }
    for k in sample.keys() {
        assert!(
            effective.contains_key(k),
            "docs/CONFIGURATION.md's sample names {k}, which tally does not have"
        );
    }
}

/// A store is counted from one stream: a counter reading another (another region's, or a
/// mistyped `--stream`) is refused before it writes anything, naming both streams and why, and
/// the counts stand as they were.
#[test]
fn a_counter_of_another_stream_is_refused() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let file = t.dir.path().join("likes.ndjson");
    std::fs::write(&file, like("e1", "p1", "u1", now_ms()) + "\n").unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let out = t.fail(
        &["--stream", "other-region-likes", "count", "--until-idle"],
        &[],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("counted from stream embedded:tally-likes")
            && said.contains("embedded:other-region-likes")
            && said.contains("docs/REGIONS.md"),
        "{said}"
    );
    assert_eq!(t.count("p1"), 1);
    t.run(&["count", "--until-idle"]);
}
