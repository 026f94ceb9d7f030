//! What an app team trips on in its first week (issue 74), each a test that failed on the build
//! before it: a store missing a part of its edges is refused by every command, naming the file,
//! and never made anew (a rebuild from such a source too); `tally query --json` has one shape
//! for one post or many, and a count of one reads "1 like"; `tally up` checks its ports before
//! it makes a store.

use crate::common::{file_in, write_likes, Target};

/// Removes `path` with its `-wal` and `-shm` files.
fn remove_with_wal(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let f = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        if f.exists() {
            std::fs::remove_file(&f).unwrap();
        }
    }
}

/// A read creates nothing: with `edges-1.db` gone, each reading command (and the counter, and a
/// rebuild from the store) fails with the file named, and the file is still not there.
#[test]
fn a_store_missing_an_edges_part_is_refused_and_never_made() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    t.run(&["produce", "--events", "400", "--posts", "20", "--seed", "3"]);
    t.run(&["count", "--until-idle"]);
    let dir = t.flag("--data-dir").unwrap();
    let part = std::path::Path::new(&dir).join("edges-1.db");
    assert!(part.is_file());
    remove_with_wal(&part);
    let named = |out: std::process::Output, what: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&part.display().to_string()) && err.contains("is missing"),
            "{what}: {err}"
        );
        assert!(!part.exists(), "{what} made {} anew", part.display());
    };
    for args in [
        &["query", "post-1"][..],
        &["total"],
        &["dead-letters"],
        &["top"],
        &["verify"],
        &["count", "--until-idle"],
    ] {
        named(t.fail(args, &[]), &args.join(" "));
    }
    let fresh = t.other_store("rebuilt");
    named(
        fresh.fail(&["rebuild", "--from-data-dir", &dir], &[]),
        "rebuild",
    );
}

/// `tally query --json` answers one post as it answers several (`POST /api/counts`' shape), and
/// the words say "1 like", never "1 likes".
#[test]
fn query_has_one_shape_and_says_1_like() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let f = file_in(&t, "likes.ndjson");
    // One like on each of q-p0 .. q-p9.
    let want = write_likes(&f, "q", 10);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let one = t.json(&["query", "q-p1", "--json"]);
    let many = t.json(&["query", "q-p1", "q-p2", "--json"]);
    for (v, n) in [(&one, 1), (&many, 2)] {
        let counts = v["counts"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(counts.len(), n, "{v}");
        assert_eq!(counts[0]["post_id"], "q-p1", "{v}");
        assert_eq!(counts[0]["count"], want["q-p1"], "{v}");
        assert!(v["applied_through"].is_object(), "{v}");
        assert!(
            v.get("count").is_none(),
            "one shape, no count at the top: {v}"
        );
    }
    let text = t.run(&["query", "q-p1"]);
    assert!(
        text.starts_with("q-p1: 1 like\n") || text.starts_with("q-p1: 1 like "),
        "{text}"
    );
    assert_eq!(t.run(&["total"]).trim(), "10 likes in total");
}

/// `tally up` on a port in use fails naming it, and makes no data dir first.
#[test]
fn tally_up_checks_its_ports_before_making_the_store() {
    let t = Target::embedded();
    let dir = std::path::PathBuf::from(t.flag("--data-dir").unwrap());
    std::fs::remove_dir(&dir).unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = t.fail(
        &["up", "--addr", &addr, "--ingest-addr", "127.0.0.1:0"],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr), "{err}");
    assert!(
        !dir.exists(),
        "tally up made {} before it failed",
        dir.display()
    );
}

/// A rebuild carries the source's store settings: a source with the recent index (likers most
/// recent first) is rebuilt into a store with it, though the rebuild was not run with the
/// setting — `/likers/recent` answers there, not 501.
#[test]
fn a_rebuild_keeps_the_source_s_recent_index() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let f = file_in(&t, "likes.ndjson");
    write_likes(&f, "r", 10);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let dir = t.flag("--data-dir").unwrap();
    let fresh = t
        .other_store("rebuilt")
        .without_env(crate::common::RECENT_INDEX_VAR);
    fresh.run(&["rebuild", "--from-data-dir", &dir]);
    fresh.run(&["count", "--until-idle"]);
    let serve = fresh.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = crate::serve::served_addr(&serve);
    let (status, _, body) =
        crate::serve::request_with(&addr, "GET", "/api/posts/r-p1/likers/recent", None, &[])
            .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["likers"][0]["user_id"], "u1", "{v}");
    assert_eq!(v["likers"].as_array().map(Vec::len), Some(1), "{v}");
}

/// Two embedded regions, each of one shard, set up: `a` (whose router puts to `b`'s store) and
/// `b`.
fn two_regions() -> (Target, Target) {
    let (a, b) = (Target::embedded(), Target::embedded());
    let f = file_in(&a, "regions.toml");
    std::fs::write(
        &f,
        format!(
            "[regions]\nthis = \"a\"\nhomes = [\"a\", \"b\"]\n[regions.peers.b]\ndata_dir = \"{}\"\n",
            b.dir.path().display()
        ),
    )
    .unwrap();
    let a = a.with_args(&["--config", f.to_str().unwrap()]);
    b.run(&["setup", "--shards", "1"]);
    a.run(&["setup", "--shards", "1"]);
    (a, b)
}

/// `tally route --worker-id` is the router's worker id: its leases are taken under it (as the
/// counter's and analytics' are), not under the host and pid.
#[test]
fn the_router_takes_its_leases_as_the_worker_it_is_told_it_is() {
    let (a, _b) = two_regions();
    let mut r = a.spawn("route", &["route", "--worker-id", "router-7"], &[]);
    a.eventually(
        "the router's lease under its --worker-id",
        std::time::Duration::from_secs(30),
        &[&r],
        || {
            let leases = a.json(&["leases", "--app", "router", "--json"]);
            leases
                .as_array()
                .is_some_and(|l| !l.is_empty() && l.iter().all(|l| l["owner"] == "router-7"))
        },
    );
    r.signal("TERM");
    assert!(
        r.wait(std::time::Duration::from_secs(30)).success(),
        "{}",
        r.log_text()
    );
}

/// Dead letters say what they cover: each is written with the counter's window that read its
/// record, so the answer says up to which arrival every record is written (`applied_through`),
/// in the CLI's words and JSON as in the API's.
#[test]
fn dead_letters_say_how_far_the_counter_has_written() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let f = file_in(&t, "likes.ndjson");
    write_likes(&f, "d", 3);
    let mut text = std::fs::read_to_string(&f).unwrap();
    text.push_str("not json\n");
    std::fs::write(&f, text).unwrap();
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let v = t.json(&["dead-letters", "--json"]);
    assert_eq!(v["total"], 1, "{v}");
    assert!(v["applied_through"]["arrival_ms"].is_i64(), "{v}");
    let text = t.run(&["dead-letters"]);
    assert!(
        text.contains("written with the counter's window that read it: every record that arrived"),
        "{text}"
    );
}

/// After a rebuild, analytics carries on from where the source's was: it reads no record the
/// source's had read (a second read of the whole stream would put every old record's age into
/// the latency figures).
#[test]
fn analytics_carries_on_after_a_rebuild() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    t.run(&[
        "produce", "--events", "1000", "--posts", "30", "--seed", "5",
    ]);
    t.run(&["count", "--until-idle"]);
    let v = t.json(&["analytics", "--until-idle", "--json"]);
    assert_eq!(v["records"], 1000, "{v}");
    let dir = t.flag("--data-dir").unwrap();
    let fresh = t.other_store("rebuilt");
    fresh.run(&["rebuild", "--from-data-dir", &dir]);
    let v = fresh.json(&["analytics", "--until-idle", "--json"]);
    assert_eq!(v["records"], 0, "{v}");
}

/// An embedded router whose home region's store is locked by another process (so its puts
/// neither go in nor fail) names that region within seconds, and stops well inside ECS's 30 s
/// after SIGTERM.
#[test]
fn a_router_names_a_home_that_takes_nothing_and_stops_in_time() {
    let (a, b) = two_regions();
    a.run(&["produce", "--events", "200", "--posts", "20", "--seed", "1"]);
    let lock = rusqlite::Connection::open(b.dir.path().join("tally.db")).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let mut r = a.spawn("route", &["route"], &[]);
    let named = std::time::Instant::now();
    while !r.log_text().contains("region b's stream") {
        assert!(
            named.elapsed() < std::time::Duration::from_secs(40),
            "region b never named: {}",
            r.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let asked = std::time::Instant::now();
    r.signal("TERM");
    r.wait(std::time::Duration::from_secs(60));
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(25),
        "stopped {:?} after SIGTERM: {}",
        asked.elapsed(),
        r.log_text()
    );
    drop(lock);
}
