//! docs/SENDING-LIKES.md's examples, run as a team whose producer is not tally's would run them
//! — boto3 (`examples/send_likes.py`) and the AWS CLI (`examples/send-likes.sh`), installed from
//! PyPI by scripts/with-aws-tools.sh — against kinesis-local, and counted exactly: what users did
//! to like buttons (double taps, toggles, unlikes of nothing, a retried action, a hot post spread
//! by user) ends as each user's latest action.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;

use crate::common::{file_in, now_ms, output, Target};

on_backends! {
    boto3_producer_is_counted_exactly {
        aws => sent_and_counted(Target::aws("boto3", 2), Sender::Boto3),
    }
}

on_backends! {
    aws_cli_producer_is_counted_exactly {
        aws => sent_and_counted(Target::aws("awscli", 2), Sender::Cli),
    }
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
    let stream = t.flag("--stream").unwrap();
    let endpoint = t.flag("--kinesis-endpoint-url").unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Command::new(root.join("scripts/with-aws-tools.sh"));
    match how {
        Sender::Boto3 => {
            c.arg("python3")
                .arg(root.join("examples/send_likes.py"))
                .args(["--stream", &stream, "--endpoint-url", &endpoint])
                .args(["--hot", "hot", "--hot-keys", "4"])
                .arg(&file);
        }
        Sender::Cli => {
            c.arg(root.join("examples/send-likes.sh"))
                .arg(&stream)
                .arg(&file)
                .env("AWS_ENDPOINT_URL", &endpoint);
        }
    }
    c.env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("AWS_PROFILE");
    let out = output(c);
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
