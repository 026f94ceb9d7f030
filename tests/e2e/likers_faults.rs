//! Likers exact whoever writes an edge and whenever a copy comes (issue 72): each case a second
//! read of the old protocol found failing, through the binary, with exact expected counts and
//! `tally verify` clean. Run against the build before the edges' change log (`E2E_TALLY_BIN`),
//! cases 2 to 6 fail as the issue reports; case 1 passed there — its stall needs both shards'
//! edge writes to land before either window is counted, a race those runs did not hit — so its
//! test guards the design without having reproduced the old stall:
//!
//! 1. Two shards each writing a like and an unlike of the other's users of one post (each
//!    window's other changes to it cancelling out): both shards stalled for good on each other's
//!    held removals. Now the counter goes idle and every later like counts.
//! 2. An edge written by another shard in three windows while a window that wrote it is pending
//!    (its worker died): the rebuilt window found no write of its own and counted the post one
//!    above the truth. Now: exact.
//! 3. Copies of an event dated ahead, once the edge's memory had moved on: a producer's retry
//!    counted (0 → 1). Now a copy never changes an outcome: an event orders by its content.
//! 4. A counter started on a store being rebuilt: it took the rebuild's leases and gave its
//!    window up as a gap. Now it is refused until the rebuild is done (`rebuild.rs` too).
//! 5. Answers above the truth with a producer keying at random: the open windows of several
//!    shards each added the same user's like. Now no answer is below zero or above what it will
//!    read once its windows are written.
//! 6. `verify` after the clock-skew setting changed exited 1: the setting is gone (an event
//!    orders by its content alone), and a configuration that still sets it is refused, naming it.
//!
//! The embedded cases put records with chosen partition keys through a recording (`tally replay`
//! keeps each record's key), so that they land on the shards the case needs.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use crate::common::{file_in, now_ms, Target};

/// A key whose records land on shard `i` of two (even hash ranges, as both streams split them).
fn key_on(i: usize) -> String {
    (0..)
        .map(|n| format!("key{n}"))
        .find(|k| usize::from(tally_core::hashing::hash_key(k) >= 1u128 << 127) == i)
        .unwrap()
}

/// One record of a recording: the key it is put with, and its action.
struct Put<'a> {
    key: &'a str,
    id: &'a str,
    post: &'a str,
    user: &'a str,
    like: bool,
    at: i64,
}

/// Puts `records` with their keys (a recording replayed: each record's key kept).
fn put(t: &Target, name: &str, records: &[Put<'_>]) {
    let path = file_in(t, name);
    let mut f = std::fs::File::create(&path).unwrap();
    let now = now_ms();
    writeln!(
        f,
        r#"{{"tally_recording":1,"recorded_at_ms":{now},"shards":[{{"shard_id":"s"}}]}}"#
    )
    .unwrap();
    for (i, r) in records.iter().enumerate() {
        let data = format!(
            r#"{{"event_id":"{}","post_id":"{}","user_id":"{}","action":"{}","created_at":{}}}"#,
            r.id,
            r.post,
            r.user,
            if r.like { "like" } else { "unlike" },
            r.at
        );
        let line = serde_json::json!({
            "shard": "s", "seq": (i + 1).to_string(), "key": r.key, "arrival_ms": now, "data": data,
        });
        writeln!(f, "{line}").unwrap();
    }
    drop(f);
    t.run(&["replay", path.to_str().unwrap()]);
}

/// The post's count, and the global total.
fn counted(t: &Target, post: &str) -> (i64, i64) {
    let q = t.query_one(&["query", post, "--json"]);
    let total = t.json(&["total", "--json"])["total"].as_i64().unwrap();
    (q["count"].as_i64().unwrap_or_else(|| panic!("{q}")), total)
}

/// `tally verify` finds the counts exact (it exits 1 on any drift).
fn verified(t: &Target) {
    let v = t.json(&["verify", "--json"]);
    assert_eq!(v["posts_off"], 0, "{v:#}");
}

/// Counts to idle, failing the test if that takes a minute (a stall).
fn counted_to_idle(t: &Target, worker: &str, env: &[(&str, &str)]) {
    t.run_env(
        &[
            "count",
            "--until-idle",
            "--timeout",
            "60s",
            "--worker-id",
            worker,
        ],
        env,
    );
}

fn two_shards(t: &Target, setup: bool) {
    if setup {
        t.run(&["setup", "--shards", "2"]);
    }
}

on_backends! {
    likes_crossing_two_shards_never_stall {
        embedded => likes_crossing_two_shards(Target::embedded(), true),
        aws => likes_crossing_two_shards(Target::aws("crossing", 2), false),
    }
}

/// Case 1: a likes the post on shard 0 and unlikes it on shard 1, b the other way round, and
/// each shard's window holds a like and an unlike of another user that cancel out.
fn likes_crossing_two_shards(t: Target, setup: bool) {
    two_shards(&t, setup);
    let (k0, k1) = (key_on(0), key_on(1));
    let at = now_ms() - 10 * 60_000;
    let p = "cross";
    let r = |key, id, user, like, at| Put {
        key,
        id,
        post: p,
        user,
        like,
        at,
    };
    put(
        &t,
        "crossing.rec",
        &[
            r(&k0, "a1", "a", true, at),
            r(&k1, "b1", "b", true, at + 1_000),
            r(&k1, "a2", "a", false, at + 2_000),
            r(&k0, "b2", "b", false, at + 3_000),
            r(&k0, "c1", "c", true, at),
            r(&k0, "c2", "c", false, at + 500),
            r(&k1, "d1", "d", true, at),
            r(&k1, "d2", "d", false, at + 500),
        ],
    );
    counted_to_idle(&t, "w", &[]);
    assert_eq!(counted(&t, p), (0, 0));
    // Later likes on either shard count.
    put(
        &t,
        "later.rec",
        &[
            r(&k0, "e1", "e", true, at + 9_000),
            r(&k1, "f1", "f", true, at + 9_000),
        ],
    );
    counted_to_idle(&t, "w", &[]);
    assert_eq!(counted(&t, p), (2, 2));
    verified(&t);
}

on_backends! {
    an_edge_other_shards_write_while_a_window_is_pending_is_counted_once {
        embedded => other_shards_write_a_pending_window_s_edge(Target::embedded(), true),
        aws => other_shards_write_a_pending_window_s_edge(Target::aws("pending", 2), false),
    }
}

/// Case 2: u likes the post on shard 0 (counted); then u unlikes it on shard 0 and the worker
/// dies right after that window's edge writes, holding shard 0's lease alone. Another worker
/// writes u's edge on shard 1 in three windows — a like, an unlike, a like — before shard 0's
/// lease expires and its window is applied again. Liked: 1.
fn other_shards_write_a_pending_window_s_edge(t: Target, setup: bool) {
    two_shards(&t, setup);
    let (k0, k1) = (key_on(0), key_on(1));
    let at = now_ms() - 10 * 60_000;
    let p = "pending";
    let r = |key, id, like, at| Put {
        key,
        id,
        post: p,
        user: "u",
        like,
        at,
    };
    put(&t, "like.rec", &[r(&k0, "l1", true, at)]);
    counted_to_idle(&t, "w0", &[]);
    assert_eq!(counted(&t, p), (1, 1));
    put(&t, "unlike.rec", &[r(&k0, "x1", false, at + 1_000)]);
    let one_lease = [
        ("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "1"),
        ("TALLY_LEASE__MAX_PER_WORKER", "1"),
        ("TALLY_LEASE__DURATION_MS", "8000"),
    ];
    let out = t.fail(&["count", "--until-idle", "--worker-id", "w1"], &one_lease);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failpoint"), "{err}");
    // Shard 1, three windows (one record each), while shard 0's lease is still the dead one's.
    put(
        &t,
        "other.rec",
        &[
            r(&k1, "l2", true, at + 2_000),
            r(&k1, "x2", false, at + 3_000),
            r(&k1, "l3", true, at + 4_000),
        ],
    );
    let one_a_window = [("TALLY_COUNTER__WINDOW_RECORDS", "1")];
    let out = t.fail(
        &[
            "count",
            "--until-idle",
            "--timeout",
            "4s",
            "--worker-id",
            "w2",
        ],
        &one_a_window,
    );
    assert_eq!(out.status.code(), Some(2), "shard 0 waits for its lease");
    counted_to_idle(&t, "w3", &[]);
    assert_eq!(counted(&t, p), (1, 1));
    verified(&t);
}

on_backends! {
    a_copy_of_an_event_never_changes_an_outcome {
        embedded => a_copy_never_changes_an_outcome(Target::embedded()),
        aws => a_copy_never_changes_an_outcome(Target::aws("copies", 1)),
    }
}

/// Case 3: a like dated ten minutes ahead (past the old build's 300 s clamp, which took its
/// arrival as its time), then five toggles of its user (created a few seconds after it arrived,
/// each counted in a window of its own) ending on an unlike; then the producer's retry of the
/// like. And in one window: four likes dated ahead and an unlike, then a retry of the first like.
/// Each retry changes nothing, and every count is the users' latest actions by their content.
fn a_copy_never_changes_an_outcome(t: Target) {
    let now = now_ms();
    let ahead = now + 600_000;
    let line = |id: &str, post: &str, user: &str, like: bool, at: i64| {
        format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"{user}","action":"{}","created_at":{at}}}"#,
            if like { "like" } else { "unlike" }
        ) + "\n"
    };
    let replay = |name: &str, lines: &[String]| {
        let path = file_in(&t, name);
        std::fs::write(&path, lines.concat()).unwrap();
        t.run(&["replay", path.to_str().unwrap()]);
        t.run(&["count", "--until-idle"]);
    };
    replay("ahead.ndjson", &[line("f1", "cp1", "u", true, ahead)]);
    for i in 1..=5 {
        let like = i % 2 == 0;
        replay(
            &format!("t{i}.ndjson"),
            &[line(&format!("t{i}"), "cp1", "u", like, now + 5_000 + i)],
        );
    }
    let before = counted(&t, "cp1").0;
    assert_eq!(before, 1, "the like dated ahead is the latest by its time");
    replay("retry.ndjson", &[line("f1", "cp1", "u", true, ahead)]);
    assert_eq!(counted(&t, "cp1").0, before, "a copy changes nothing");

    let window: Vec<String> = (0..4)
        .map(|i| line(&format!("g{i}"), "cp2", "v", true, ahead + i))
        .chain([line("g9", "cp2", "v", false, now)])
        .collect();
    replay("window.ndjson", &window);
    let before = counted(&t, "cp2").0;
    assert_eq!(before, 1);
    replay("retry2.ndjson", &[line("g0", "cp2", "v", true, ahead)]);
    assert_eq!(counted(&t, "cp2").0, before, "a copy changes nothing");
    verified(&t);
}

on_backends! {
    a_counter_started_on_a_store_being_rebuilt_is_refused {
        embedded => a_store_being_rebuilt_refuses_counters(Target::embedded()),
        aws => a_store_being_rebuilt_refuses_counters(Target::aws("rebuilding", 1)),
    }
}

/// Case 4: a rebuild dies after its first page of edges (`TALLY_FAILPOINT_CRASH_AFTER_BATCHES`);
/// a counter started on its destination then is refused, naming the rebuild and what to do, and
/// counts nothing; the rebuild run again resumes, and the counter counts the destination exact.
fn a_store_being_rebuilt_refuses_counters(t: Target) {
    let file = file_in(&t, "likes.ndjson");
    let want = crate::common::write_likes(&file, "rb", 2_500);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let fresh = t.other_store("rebuilt");
    let from = match t.flag("--table-prefix") {
        Some(p) => ["--from-table-prefix".to_owned(), p],
        None => ["--from-data-dir".to_owned(), t.flag("--data-dir").unwrap()],
    };
    let rebuild = ["rebuild", from[0].as_str(), from[1].as_str()];
    let out = fresh.fail(&rebuild, &[("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "1")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("failpoint"));
    let out = fresh.fail(&["count", "--until-idle"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`tally rebuild` from") && err.contains("Run the rebuild again"),
        "{err}"
    );
    assert_eq!(
        fresh.json(&["total", "--json"])["total"],
        0,
        "nothing counted"
    );
    let r = fresh.json(&[rebuild[0], rebuild[1], rebuild[2], "--json"]);
    assert_eq!(r["resumed"], true, "{r}");
    fresh.run(&["count", "--until-idle"]);
    assert_eq!(fresh.mismatches(&want), vec![]);
}

/// Case 5: an app's producer keys its records at random; 40 posts get 280 taps that are all
/// likes, put at a steady pace while a worker counts and shows its open windows and the read side
/// answers. Every answer of every post is at least zero and at most the post's final count
/// (each count only grows); once the windows are written every answer is the truth.
#[test]
fn answers_never_exceed_what_they_will_read_under_random_keys() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "4"]);
    let posts: Vec<String> = (0..40).map(|i| format!("rk{i:02}")).collect();
    let at = now_ms() - 5 * 60_000;
    let mut truth: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let path = file_in(&t, "random.rec");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(
        f,
        r#"{{"tally_recording":1,"recorded_at_ms":{},"shards":[{{"shard_id":"s"}}]}}"#,
        now_ms()
    )
    .unwrap();
    for i in 0..280u64 {
        let post = &posts[(i * 7 % 40) as usize];
        let user = format!("u{}", i % 23);
        truth.entry(post.clone()).or_default().insert(user.clone());
        let data = format!(
            r#"{{"event_id":"r{i}","post_id":"{post}","user_id":"{user}","action":"like","created_at":{}}}"#,
            at + i as i64
        );
        let key = format!(
            "random-{}",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_003
        );
        // A second tap of a like now and then: a copy under another key.
        let copies = if i % 9 == 0 { 2 } else { 1 };
        for c in 0..copies {
            let line = serde_json::json!({
                "shard": "s", "seq": (2 * i + c + 1).to_string(), "key": format!("{key}-{c}"),
                "arrival_ms": now_ms(), "data": data,
            });
            writeln!(f, "{line}").unwrap();
        }
    }
    drop(f);
    let want: BTreeMap<String, i64> = posts
        .iter()
        .map(|p| (p.clone(), truth.get(p).map_or(0, |u| u.len() as i64)))
        .collect();
    let env = [
        ("TALLY_LEASE__IDLE_POLL_MS", "100"),
        ("TALLY_COUNTER__WINDOW_MS", "3000"),
    ];
    let mut worker = t.spawn(
        "count",
        &["count", "--worker-id", "w", "--http", "127.0.0.1:0"],
        &env,
    );
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = crate::serve::served_addr(&serve);
    let mut producer = t.spawn(
        "replay",
        &["replay", path.to_str().unwrap(), "--rate", "60"],
        &[],
    );
    let ids = posts.join(",");
    let (mut answers, mut over) = (0, Vec::new());
    let check = |v: &serde_json::Value, over: &mut Vec<String>| {
        for c in v["counts"].as_array().unwrap() {
            let post = c["post_id"].as_str().unwrap();
            let n = c["count"].as_i64().unwrap();
            if n < 0 || n > want[post] {
                over.push(format!("{post}: {n} of {}: {c}", want[post]));
            }
        }
    };
    while producer.child.try_wait().unwrap().is_none() {
        let v = crate::serve::get_json(&addr, &format!("/api/counts?ids={ids}"));
        check(&v, &mut over);
        answers += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(producer.wait(Duration::from_secs(10)).success());
    t.eventually(
        "every like counted",
        Duration::from_secs(60),
        &[&worker],
        || {
            let v = crate::serve::get_json(&addr, &format!("/api/counts?ids={ids}"));
            check(&v, &mut over);
            answers += 1;
            v["counts"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["stored"] == want[c["post_id"].as_str().unwrap()])
        },
    );
    assert!(answers > 20, "asked {answers} times");
    assert!(
        over.is_empty(),
        "{} answers out of range: {over:#?}",
        over.len()
    );
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success());
    assert_eq!(t.mismatches(&want), vec![]);
    verified(&t);
}

/// Case 6: the clock-skew setting is gone — an event orders by its content alone, so no setting
/// decides a window's effect any more and `verify` has nothing to recount differently. A
/// configuration that still sets it is refused, naming the key.
#[test]
fn the_clock_skew_setting_is_refused_naming_it() {
    let t = Target::embedded();
    let out = t.fail(
        &["count", "--until-idle"],
        &[("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS", "300")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS") && err.contains("max_clock_skew_secs"),
        "{err}"
    );
}
