//! Likers, end to end through the binary on both backends: a post's count is the number of users
//! whose latest action is a like — a double tap counts once, an unlike of nothing changes
//! nothing, out-of-order and late copies end as in order, a clock far ahead is taken at its
//! word — across a crash after a window's edge writes; "since T" counts the
//! likers whose latest like is at or after T; the viewer's likes come beside the counts; a store
//! counted in one mode refuses the other.

use std::collections::BTreeMap;
use std::io::Write;

use crate::common::{file_in, now_ms, Target};

const LIKERS: (&str, &str) = ("TALLY_COUNTER__COUNT", "likers");

on_backends! {
    likers_count_users_not_events {
        embedded => likers_count_users_not_events(Target::embedded()),
        aws => likers_count_users_not_events(Target::aws("likers", 2)),
    }
}

/// One line of contract v1.
fn line(f: &mut std::fs::File, id: &str, post: &str, user: &str, action: &str, at: i64) {
    writeln!(
        f,
        r#"{{"event_id":"{id}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{at}}}"#
    )
    .unwrap();
}

/// What users did to like buttons, in the order the stream carries it; the counts of likers.
fn write_actions(path: &std::path::Path, m0: i64) -> BTreeMap<&'static str, i64> {
    let mut f = std::fs::File::create(path).unwrap();
    let min = 60_000;
    // u1 likes p1 three times, a minute apart: a double tap, a second device, a retry with a
    // new event id. One liker.
    line(&mut f, "a1", "lk-p1", "u1", "like", m0 + 5_000);
    line(&mut f, "a2", "lk-p1", "u1", "like", m0 + min + 5_000);
    line(&mut f, "a3", "lk-p1", "u1", "like", m0 + 2 * min + 5_000);
    // u2 unlikes p2 twice without ever liking it: nothing, never below zero.
    line(&mut f, "b1", "lk-p2", "u2", "unlike", m0 + 5_000);
    line(&mut f, "b2", "lk-p2", "u2", "unlike", m0 + 6_000);
    // u3 liked p3 and unliked it; the unlike arrives first (a retry landing after a newer
    // event): unliked, as in order. u4's like of p3 comes twice (a producer retry).
    line(&mut f, "c2", "lk-p3", "u3", "unlike", m0 + 10_000);
    line(&mut f, "c1", "lk-p3", "u3", "like", m0 + 5_000);
    line(&mut f, "d1", "lk-p3", "u4", "like", m0 + 20_000);
    line(&mut f, "d1", "lk-p3", "u4", "like", m0 + 20_000);
    // u5 toggles p4: like, unlike, like; then a late copy of the first like. Liked.
    line(&mut f, "e1", "lk-p4", "u5", "like", m0 + 1_000);
    line(&mut f, "e2", "lk-p4", "u5", "unlike", m0 + 2_000);
    line(&mut f, "e3", "lk-p4", "u5", "like", m0 + 3_000);
    line(&mut f, "e1", "lk-p4", "u5", "like", m0 + 1_000);
    // u6's device clock is a day ahead: its like is taken at its word (an edge orders events by
    // their content alone, so every copy of it, in every store, orders the same), and the unlike
    // it sends a minute later from a right clock is older. Liked.
    let now = now_ms();
    line(&mut f, "f1", "lk-p4", "u6", "like", now + 86_400_000);
    line(&mut f, "f2", "lk-p4", "u6", "unlike", now + min);
    BTreeMap::from([("lk-p1", 1), ("lk-p2", 0), ("lk-p3", 1), ("lk-p4", 2)])
}

fn likers_count_users_not_events(t: Target) {
    let file = file_in(&t, "actions.ndjson");
    let now = now_ms();
    let m0 = now - now % 60_000 - 30 * 60_000;
    let want = write_actions(&file, m0);
    t.run(&["replay", file.to_str().unwrap()]);
    // Crash right after the first window's edges are written, before any count: nothing lost,
    // nothing counted twice when the window is applied again.
    let out = t.fail(
        &["count", "--until-idle", "--worker-id", "w"],
        &[LIKERS, ("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "1")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failpoint"), "{err}");
    assert_eq!(
        t.json(&["total", "--json"])["total"],
        0,
        "no count before the edges' counts"
    );
    t.run_env(&["count", "--until-idle", "--worker-id", "w"], &[LIKERS]);
    let want_owned: BTreeMap<String, i64> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_eq!(t.mismatches(&want_owned), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], 4);
    // Replayed again (every event a late copy): nothing changes.
    t.run(&["replay", file.to_str().unwrap()]);
    t.run_env(&["count", "--until-idle", "--worker-id", "w"], &[LIKERS]);
    assert_eq!(t.mismatches(&want_owned), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], 4);

    // "Since T": likers whose latest like is at or after T's minute. u1's is in minute m0 + 2.
    // On a wrong answer, the answer itself, the leases and the minute asked (m0) are shown.
    let since = |post: &str, at: i64, want: i64| {
        let q = t.query_one(&["query", post, "--since", &at.to_string(), "--json"]);
        let got = q["count_since"].as_i64().unwrap_or_else(|| panic!("{q}"));
        if got != want {
            let leases = t.json(&["leases", "--json"]);
            panic!("{post} since {at} (m0 = {m0}): {got}, expected {want}\n{q:#}\n{leases:#}");
        }
    };
    since("lk-p1", m0 + 60_000, 1);
    since("lk-p1", m0 + 2 * 60_000 + 59_000, 1);
    since("lk-p1", m0 + 3 * 60_000, 0);
    since("lk-p3", m0, 1);

    // The viewer's own likes beside the counts, in one batch.
    let page = t.json(&[
        "query", "lk-p1", "lk-p3", "lk-p4", "lk-p2", "--viewer", "u1", "--json",
    ]);
    let liked: Vec<bool> = page["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["viewer_liked"].as_bool().unwrap())
        .collect();
    assert_eq!(liked, vec![true, false, false, false], "{page}");
    let one = t.query_one(&["query", "lk-p3", "--viewer", "u4", "--json"]);
    assert_eq!(
        (one["count"].as_i64(), one["viewer_liked"].as_bool()),
        (Some(1), Some(true)),
        "{one}"
    );
    let one = t.query_one(&["query", "lk-p4", "--viewer", "u6", "--json"]);
    assert_eq!(one["viewer_liked"], true, "{one}");
    let text = t.run(&["query", "lk-p1", "--viewer", "u1"]);
    assert!(text.contains("lk-p1: 1 like (u1 likes it)"), "{text}");

    // A store counted by likers refuses to be counted by events, saying what to do.
    let out = t.fail(
        &["count", "--until-idle"],
        &[("TALLY_COUNTER__COUNT", "events")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("this store counts likers") && err.contains("counter.count"),
        "{err}"
    );
}

on_backends! {
    events_mode_counts_events {
        embedded => events_mode_counts_events(Target::embedded()),
    }
}

/// `counter.count = "events"` keeps counting events (claps, views): the same actions give
/// their net event counts, and the store keeps no likers to ask about.
fn events_mode_counts_events(t: Target) {
    let file = file_in(&t, "actions.ndjson");
    let now = now_ms();
    write_actions(&file, now - now % 60_000 - 30 * 60_000);
    t.run(&["replay", file.to_str().unwrap()]);
    let events = [("TALLY_COUNTER__COUNT", "events")];
    t.run_env(&["count", "--until-idle"], &events);
    assert_eq!(t.count("lk-p1"), 3);
    assert_eq!(t.count("lk-p2"), -2);
    let out = t.fail(&["query", "lk-p1", "--viewer", "u1"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("counts events"), "{err}");
    let out = t.fail(&["count", "--until-idle"], &[LIKERS]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("this store counts events"));
    // `verify` recounts events on a store that counts them (as the store says, whatever the
    // setting), in one pass and in many, and keeps no edges to sample.
    for extra in [&[][..], &["--memory", "2KiB"]] {
        let mut args = vec!["verify", "--json"];
        args.extend_from_slice(extra);
        let v = t.json(&args);
        assert_eq!(v["posts_off"], 0, "{v:#}");
        assert_eq!(v["posts_checked"], 4, "{v:#}");
        assert_eq!(v["global_total"]["recount"], 3, "{v:#}");
        assert!(v["edges"].is_null(), "{v:#}");
        assert_eq!(
            v["passes"].as_u64().unwrap() > 1,
            !extra.is_empty(),
            "{v:#}"
        );
    }
}

/// Behind the tip a likers window holds up to its share of the worker's records
/// (`counter.worker_window_records`, 800,000, shared by a shard's two windows: all 50,000 records
/// of a worker's one shard in one window), where counting events stops at the dedup record's
/// 20,000; a smaller budget makes smaller windows, never below 20,000 records. Every count exact
/// each way.
#[test]
fn behind_the_tip_a_likers_window_takes_its_shard_s_share_of_the_worker_s_records() {
    let windows = |count: &str, budget: Option<&str>| {
        let t = Target::embedded();
        t.run(&["setup", "--shards", "1"]);
        // Only a window's size closes it here: the records are all behind the tip.
        let mut env = vec![
            ("TALLY_COUNTER__COUNT", count),
            ("TALLY_COUNTER__WINDOW_MS", "600000"),
        ];
        if let Some(b) = budget {
            env.push(("TALLY_COUNTER__WORKER_WINDOW_RECORDS", b));
        }
        // The truth file counts as the setting says.
        let truth_file = file_in(&t, "truth.json");
        t.run_env(
            &[
                "produce",
                "--events",
                "50000",
                "--posts",
                "300",
                "--seed",
                "5",
                "--truth",
                truth_file.to_str().unwrap(),
            ],
            &env,
        );
        let truth: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
        let want: BTreeMap<String, i64> = serde_json::from_value(truth["counts"].clone()).unwrap();
        let c = t.json_env(&["count", "--until-idle", "--json"], &env);
        assert_eq!(c["records"], 50_000, "{c}");
        assert_eq!(t.mismatches(&want), vec![], "{count}, budget {budget:?}");
        c["windows"].as_u64().unwrap()
    };
    assert_eq!(windows("likers", None), 1);
    assert_eq!(windows("events", None), 3);
    assert_eq!(windows("likers", Some("60000")), 2);
    assert_eq!(windows("likers", Some("1000")), 3);
}
