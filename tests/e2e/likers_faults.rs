//! Likers under the faults that once made a window's effect be decided again: each case below
//! is one that went wrong before a window's edge writes were remembered on the items (its own
//! write found again whatever other shards wrote since), its edge record kept for a give-up, and
//! its clock skew kept with it — through the binary, with exact expected counts and `tally
//! verify` clean.
//!
//! 1. A pending window given up as a gap after its edge writes: its edges are counted.
//! 2. Two shards writing one edge (a hot post's keys changed mid-run), with a crash between a
//!    window's edge writes and its counts: nothing lost.
//! 3. A pending window rebuilt under another `max_clock_skew_secs`: it counts what it decided.
//! 4. A producer's retry arriving after the clamp horizon: a copy changes nothing (also when
//!    the clamped first copy lost, inside its window or at the edge).
//! 5. `as_of_ms` counting likers: refused, with the reason (`serve.rs`, `openapi.rs`).
//! 6. `verify` after the skew setting changed: it recounts with what the store was counted with.

use std::io::Write;
use std::time::Duration;

use crate::common::{file_in, now_ms, Target};

const POST: &str = "xp";

/// One line of contract v1.
fn line(f: &mut std::fs::File, id: &str, post: &str, user: &str, action: &str, at: i64) {
    writeln!(
        f,
        r#"{{"event_id":"{id}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{at}}}"#
    )
    .unwrap();
}

/// Writes `lines` (id, user, action, created_at) of `post` to a new file and replays it.
fn replay(
    t: &Target,
    name: &str,
    post: &str,
    lines: &[(&str, &str, &str, i64)],
    env: &[(&str, &str)],
) {
    let path = file_in(t, name);
    let mut f = std::fs::File::create(&path).unwrap();
    for (id, user, action, at) in lines {
        line(&mut f, id, post, user, action, *at);
    }
    drop(f);
    t.run_env(&["replay", path.to_str().unwrap()], env);
}

/// The post's count, its viewer's like, and the global total.
fn counted(t: &Target, post: &str, viewer: &str) -> (i64, bool, i64) {
    let q = t.json(&["query", post, "--viewer", viewer, "--json"]);
    let total = t.json(&["total", "--json"])["total"].as_i64().unwrap();
    (
        q["count"].as_i64().unwrap_or_else(|| panic!("{q}")),
        q["viewer_liked"].as_bool().unwrap_or_else(|| panic!("{q}")),
        total,
    )
}

/// `tally verify` finds the counts exact (it exits 1 on any drift).
fn verified(t: &Target) {
    let v = t.json(&["verify", "--json"]);
    assert_eq!(v["posts_off"], 0, "{v:#}");
}

/// A crash right after a window's first batch of edge writes, before any count.
const CRASH: (&str, &str) = ("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "1");

fn crashed(t: &Target, env: &[(&str, &str)]) {
    let out = t.fail(&["count", "--until-idle", "--worker-id", "w"], env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failpoint"), "{err}");
}

/// Case 1 (embedded: only its stream can trim on demand): a like's window writes its edge, the
/// process dies, retention trims the window's records while it is pending, the gap path gives it
/// up. Its edge was counted then; a later unlike takes the count to 0, not −1.
#[test]
fn a_given_up_window_s_written_edges_are_counted() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let at = now_ms() - 10 * 60_000;
    replay(
        &t,
        "like.ndjson",
        POST,
        &[("g1", "u1", "like", at), ("g2", "u2", "like", at)],
        &[],
    );
    crashed(&t, &[CRASH]);
    assert_eq!(
        t.json(&["total", "--json"])["total"],
        0,
        "no count before the edges'"
    );
    let trimmed = t.run(&["trim", "--older-than", "1ms", "--yes"]);
    assert!(trimmed.contains("trimmed 2 records"), "{trimmed}");
    t.run(&["count", "--until-idle", "--worker-id", "w2"]);
    assert_eq!(
        counted(&t, POST, "u1"),
        (2, true, 2),
        "the given-up window's edges count"
    );
    let letters = t.json(&["dead-letters", "--json"]);
    let reason = letters["dead_letters"][0]["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.starts_with("gap:") && reason.contains("2 edges it had written are counted"),
        "{letters:#}"
    );
    replay(
        &t,
        "unlike.ndjson",
        POST,
        &[("g3", "u1", "unlike", at + 60_000)],
        &[],
    );
    t.run(&["count", "--until-idle", "--worker-id", "w2"]);
    assert_eq!(
        counted(&t, POST, "u1"),
        (1, false, 1),
        "never below the truth"
    );
}

on_backends! {
    two_shards_writing_one_edge_with_a_crash_lose_nothing {
        embedded => two_shards_writing_one_edge(Target::embedded(), true),
        aws => two_shards_writing_one_edge(Target::aws("crossed", 2), false),
    }
}

/// Case 2: 30 users like a post, keyed by the post (all on shard 0); the counter dies after the
/// window's edge writes, holding shard 0's lease (and no other: one lease per worker). Then the
/// post turns hot (`producer.hot_posts`: keyed by user) and every user unlikes it, about half of
/// them on shard 1. The next worker takes shard 1 at once and applies those unlikes over shard
/// 0's edges (liked → unliked) before shard 0's lease expires and its window is rebuilt: the
/// rebuilt window must find its own unliked → liked on each edge, or the post ends below zero.
fn two_shards_writing_one_edge(t: Target, setup: bool) {
    if setup {
        t.run(&["setup", "--shards", "2"]);
    }
    // A post keyed to shard 0 (of two even hash ranges).
    let post = (0..)
        .map(|i| format!("xp{i}"))
        .find(|p| tally_core::hashing::hash_key(p) < 1u128 << 127)
        .unwrap();
    let at = now_ms() - 10 * 60_000;
    let users: Vec<String> = (0..30).map(|i| format!("u{i:02}")).collect();
    let ids: Vec<(String, String)> = users
        .iter()
        .map(|u| (format!("l-{u}"), format!("x-{u}")))
        .collect();
    let likes: Vec<(&str, &str, &str, i64)> = users
        .iter()
        .zip(&ids)
        .map(|(u, (l, _))| (l.as_str(), u.as_str(), "like", at))
        .collect();
    replay(&t, "likes.ndjson", &post, &likes, &[]);
    let one_lease = [
        CRASH,
        ("TALLY_LEASE__MAX_PER_WORKER", "1"),
        ("TALLY_LEASE__DURATION_MS", "15000"),
    ];
    crashed(&t, &one_lease);
    // The post turns hot: its unlikes are keyed by user, spread over both shards.
    let hot = file_in(&t, "hot.toml");
    std::fs::write(
        &hot,
        format!("[producer]\nhot_posts = [\"{post}\"]\nhot_post_keys = 8\n"),
    )
    .unwrap();
    let unlikes: Vec<(&str, &str, &str, i64)> = users
        .iter()
        .zip(&ids)
        .map(|(u, (_, x))| (x.as_str(), u.as_str(), "unlike", at + 60_000))
        .collect();
    let path = file_in(&t, "unlikes.ndjson");
    let mut f = std::fs::File::create(&path).unwrap();
    for (id, user, action, created) in &unlikes {
        line(&mut f, id, &post, user, action, *created);
    }
    drop(f);
    t.run(&[
        "--config",
        hot.to_str().unwrap(),
        "replay",
        path.to_str().unwrap(),
    ]);
    // The stored count, read all along while the next worker counts: the unlikes written over
    // shard 0's uncounted likes are held until shard 0's window is rebuilt (its lease expires),
    // so the count never reads below zero (it read −15 or so for a lease expiry before).
    let mut w2 = t.spawn("w2", &["count", "--until-idle", "--worker-id", "w2"], &[]);
    let mut seen = Vec::new();
    while w2.child.try_wait().unwrap().is_none() {
        let q = t.json(&["query", &post, "--stored", "--json"]);
        seen.push(q["count"].as_i64().unwrap_or_else(|| panic!("{q}")));
    }
    assert!(
        w2.wait(Duration::from_secs(5)).success(),
        "{}",
        w2.log_text()
    );
    assert!(seen.len() >= 10, "read all along: {seen:?}");
    let below = seen.iter().filter(|&&n| n < 0).count();
    assert_eq!(
        below,
        0,
        "the count never reads below zero: {below} of {} reads did, the lowest {:?}",
        seen.len(),
        seen.iter().min()
    );
    let log = w2.log_text();
    assert!(
        log.contains("are held until those windows have written their counts"),
        "some unlikes were written over shard 0's writes from shard 1, and held: {log}"
    );
    assert!(!log.contains("no longer remember"), "{log}");
    assert_eq!(counted(&t, &post, "u00"), (0, false, 0));
    verified(&t);
}

on_backends! {
    a_rebuilt_window_keeps_the_clock_skew_it_was_decided_with {
        embedded => a_rebuilt_window_keeps_its_skew(Target::embedded()),
        aws => a_rebuilt_window_keeps_its_skew(Target::aws("skew", 1)),
    }
}

/// Case 3: a like dated two minutes ahead, counted under a skew of 5 s (ordered at its arrival);
/// the worker dies after the edge batch and a worker with the default 300 s rebuilds the window.
/// It must count the like it decided (count 1), not find "liked → liked" (count 0 with the user
/// shown as liking it).
fn a_rebuilt_window_keeps_its_skew(t: Target) {
    let ahead = now_ms() + 120_000;
    replay(
        &t,
        "ahead.ndjson",
        POST,
        &[("s1", "u1", "like", ahead)],
        &[],
    );
    crashed(&t, &[CRASH, ("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS", "5")]);
    t.run(&["count", "--until-idle", "--worker-id", "w2"]);
    assert_eq!(counted(&t, POST, "u1"), (1, true, 1));
}

on_backends! {
    a_retry_after_the_clamp_changes_nothing {
        embedded => a_retry_after_the_clamp(Target::embedded()),
        aws => a_retry_after_the_clamp(Target::aws("clamp", 1)),
    }
}

/// Case 4: a like dated 20 s ahead is clamped to its arrival (skew 5 s); an honest unlike
/// follows (count 0); the producer's retry of the like arrives 16 s later, no longer "ahead". A
/// copy changes nothing: still 0, and `verify` (the first copy decides the clamp) agrees.
fn a_retry_after_the_clamp(t: Target) {
    let skew = [("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS", "5")];
    let start = now_ms();
    let ahead = start + 20_000;
    replay(&t, "like.ndjson", POST, &[("c1", "u1", "like", ahead)], &[]);
    t.run_env(&["count", "--until-idle"], &skew);
    assert_eq!(counted(&t, POST, "u1"), (1, true, 1));
    replay(
        &t,
        "unlike.ndjson",
        POST,
        &[("c2", "u1", "unlike", now_ms())],
        &[],
    );
    t.run_env(&["count", "--until-idle"], &skew);
    assert_eq!(
        counted(&t, POST, "u1"),
        (0, false, 0),
        "the like was clamped"
    );
    // The retry arrives when its time is within the skew of its arrival.
    let due = ahead - 5_000 + 1_000;
    std::thread::sleep(std::time::Duration::from_millis(
        (due - now_ms()).max(0) as u64
    ));
    replay(
        &t,
        "retry.ndjson",
        POST,
        &[("c1", "u1", "like", ahead)],
        &[],
    );
    t.run_env(&["count", "--until-idle"], &skew);
    assert_eq!(
        counted(&t, POST, "u1"),
        (0, false, 0),
        "a copy changes nothing"
    );
    verified(&t);
}

on_backends! {
    a_retry_of_a_clamped_like_that_lost_changes_nothing {
        embedded => a_retry_of_a_clamped_loser(Target::embedded()),
        aws => a_retry_of_a_clamped_loser(Target::aws("clamplost", 1)),
    }
}

/// Case 4, when the clamped first copy lost: a like dated 30 s ahead is clamped to its arrival
/// (skew 10 s) and loses to an unlike dated 9 s ahead (within the skew) — for u1 inside one
/// window, for u2 at the edge the unlike was written to before. The like's retry arrives when
/// its time is within the skew of its arrival, so it orders at its `created_at`, after the
/// unlike: nothing remembered the first copy's clamp but the edge (its lost clamped events), so
/// without that the retry wins (count 2). Still 0, and `verify` agrees.
fn a_retry_of_a_clamped_loser(t: Target) {
    let skew = [("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS", "10")];
    let start = now_ms();
    let (unlike_at, like_at) = (start + 9_000, start + 30_000);
    replay(
        &t,
        "u2-unlike.ndjson",
        POST,
        &[("k2u", "u2", "unlike", unlike_at)],
        &[],
    );
    t.run_env(&["count", "--until-idle"], &skew);
    replay(
        &t,
        "actions.ndjson",
        POST,
        &[
            ("k1u", "u1", "unlike", unlike_at),
            ("k1l", "u1", "like", like_at),
            ("k2l", "u2", "like", like_at),
        ],
        &[],
    );
    assert!(
        now_ms() < unlike_at,
        "the likes must arrive before the unlikes' time for the test to mean anything"
    );
    t.run_env(&["count", "--until-idle"], &skew);
    let lost = counted(&t, POST, "u1");
    if lost != (0, false, 0) {
        // Failed once in CI on DynamoDB Local (count 1, u1 not liked, total 1: u2's like won)
        // and not again in 12 runs under load; what a next failure needs to be explained.
        let u2 = t.json(&["query", POST, "--viewer", "u2", "--json"]);
        let stream = t.run(&["record", "-"]);
        panic!(
            "the likes lost: {lost:?} (count, u1 liked, total); start {start}, unlike at \
             {unlike_at}, like at {like_at}; u2's answer {u2}; the stream:\n{stream}"
        );
    }
    // The retries arrive when the likes' time is within the skew of their arrival.
    let due = like_at - 10_000 + 1_000;
    std::thread::sleep(std::time::Duration::from_millis(
        (due - now_ms()).max(0) as u64
    ));
    replay(
        &t,
        "retries.ndjson",
        POST,
        &[
            ("k1l", "u1", "like", like_at),
            ("k2l", "u2", "like", like_at),
        ],
        &[],
    );
    t.run_env(&["count", "--until-idle"], &skew);
    assert_eq!(
        counted(&t, POST, "u2"),
        (0, false, 0),
        "a copy of a clamped like that lost changes nothing"
    );
    assert!(!counted(&t, POST, "u1").1, "u1 does not like it");
    verified(&t);
}

on_backends! {
    verify_recounts_with_the_skew_the_store_was_counted_with {
        embedded => verify_uses_the_recorded_skew(Target::embedded()),
        aws => verify_uses_the_recorded_skew(Target::aws("vskew", 1)),
    }
}

/// Case 6: counted with a skew of 10 s, a like dated a minute ahead orders at its arrival and an
/// unlike 3 s ahead wins (count 0). `verify` under today's default (300 s) must recount with the
/// 10 s the store was counted with — exact — and say when the store was counted with several.
fn verify_uses_the_recorded_skew(t: Target) {
    let skew = [("TALLY_COUNTER__MAX_CLOCK_SKEW_SECS", "10")];
    let now = now_ms();
    replay(
        &t,
        "actions.ndjson",
        POST,
        &[
            ("v1", "u1", "like", now + 60_000),
            ("v2", "u1", "unlike", now + 3_000),
        ],
        &[],
    );
    t.run_env(&["count", "--until-idle"], &skew);
    assert_eq!(counted(&t, POST, "u1"), (0, false, 0));
    verified(&t);
    // Counted once more under another skew: verify recounts with the latest and says that a
    // post near the clamp may differ (this one does: it exits 1, naming it).
    t.run(&["count", "--until-idle"]);
    let out = t.cmd(&["verify", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = v["not_checked"].to_string();
    assert!(
        notes.contains("several clock skews (10000,300000 ms"),
        "{v:#}"
    );
}
