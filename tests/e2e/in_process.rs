//! tally as a library, in process: the settings' layers and errors, and the read API's router
//! answering over an embedded store the binary counted — exact counts, the same answer shape as
//! `tally query --json`, and a bad request named.

use std::collections::BTreeMap;
use std::future::pending;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tally::settings::Settings;
use tower::ServiceExt;

use crate::common::{file_in, write_contract_file, Target};

#[test]
fn a_file_and_flags_override_the_defaults_and_a_bad_value_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tally.toml");
    std::fs::write(
        &file,
        "stream = \"from-file\"\nshards = 9\n[counter]\nwindow_records = 77\nwindow_ms = 250\n\
         [lease]\nfinished_grace_secs = 60\n",
    )
    .unwrap();
    let s = Settings::load(Some(&file), |s| s.stream = "from-flag".into()).unwrap();
    assert_eq!(s.stream, "from-flag", "a flag beats the file");
    assert_eq!((s.shards, s.counter.window_records), (9, 77));
    // A key's unit is its name's: the runtime type holds the duration it says.
    assert_eq!(s.counter.window_time, Duration::from_millis(250));
    assert_eq!(s.lease.finished_lease_grace, Duration::from_secs(60));
    let d = Settings::default();
    assert_eq!(s.table_prefix, d.table_prefix);
    assert_eq!(s.counter.dedup_horizon, d.counter.dedup_horizon);

    std::fs::write(&file, "[counter]\nwindow_records = 0\n").unwrap();
    let e = Settings::load(Some(&file), |_| {}).unwrap_err().to_string();
    assert!(e.contains("`counter.window_records`"), "{e}");
    assert!(e.contains("between 1 and"), "{e}");

    // A flag's value is checked as the file's is.
    std::fs::write(&file, "").unwrap();
    let e = Settings::load(Some(&file), |s| s.lease.batch_limit = 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`lease.batch_limit` must be between 1 and 10000, got 0"),
        "{e}"
    );
}

/// The read side's router over the target's store, and its listings' refresher (abort it at the
/// end).
async fn router_over(t: &Target) -> (axum::Router, tokio::task::JoinHandle<()>) {
    let settings = Settings::load(None, |s| s.data_dir = t.dir.path().to_owned()).unwrap();
    let backend = tally::backend::Backend::open_existing(&settings)
        .await
        .unwrap();
    let (ctx, refresher) = tally_serve::Ctx::start(
        backend.readers(&settings).await.unwrap(),
        settings.analytics.half_life,
    )
    .await
    .unwrap();
    (tally_serve::router(ctx), refresher)
}

/// One GET of the router, in process: status and body.
async fn get_text(router: &axum::Router, uri: &str) -> (StatusCode, String) {
    let req = Request::get(uri).body(Body::empty()).unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// One GET of a JSON route.
async fn get(router: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let (status, body) = get_text(router, uri).await;
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: {e}: {body}"));
    (status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_answers_exact_counts_as_the_cli_does() {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 600, 12, 7);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);

    let (router, refresher) = router_over(&t).await;

    let (status, health) = get_text(&router, "/healthz").await;
    assert_eq!(status, StatusCode::OK, "{health}");

    let ids: Vec<&String> = exp.counts.keys().collect();
    let list = ids.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
    let (status, page) = get(&router, &format!("/api/counts?ids={list}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let got: BTreeMap<String, i64> = page["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let id = c["post_id"].as_str().unwrap().to_owned();
            (id, c["count"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(got, exp.counts);

    // One post over HTTP and through the CLI: the same count, the same fields.
    let id = ids[0];
    let (_, api) = get(&router, &format!("/api/posts/{id}")).await;
    let cli: Value = serde_json::from_str(&t.run(&["query", id, "--json"])).unwrap();
    let cli = &cli["counts"][0];
    assert_eq!(api["count"], exp.counts[id]);
    for field in ["post_id", "count", "stored", "pending", "read_units"] {
        assert_eq!(api[field], cli[field], "{field}: {api} vs {cli}");
    }

    let (status, bad) = get(&router, "/api/posts/has%20space").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("post_id"), "{bad}");
    refresher.abort();
}

/// The viewer's likes beside a feed page's counts, and a post's likers in pages, through the
/// router in process (counting likers, the default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_answers_the_viewer_s_likes_and_a_post_s_likers() {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    let now = crate::common::now_ms();
    let mut lines = String::new();
    for (i, (post, user, action)) in [
        ("vp1", "ann", "like"),
        ("vp1", "bob", "like"),
        ("vp1", "cat", "like"),
        ("vp1", "bob", "unlike"),
        ("vp2", "bob", "like"),
        ("vp2", "ann", "unlike"),
    ]
    .iter()
    .enumerate()
    {
        lines.push_str(&format!(
            "{{\"event_id\":\"v{i}\",\"post_id\":\"{post}\",\"user_id\":\"{user}\",\"action\":\"{action}\",\"created_at\":{}}}\n",
            now + i as i64
        ));
    }
    std::fs::write(&file, lines).unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let (router, refresher) = router_over(&t).await;

    let (status, page) = get(&router, "/api/counts?ids=vp1,vp2,vp3&viewer=bob").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let got: Vec<(i64, bool)> = page["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["count"].as_i64().unwrap(),
                c["viewer_liked"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(2, false), (1, true), (0, false)], "{page}");
    assert_eq!(
        page["viewer_read_units"], 3,
        "one read unit per (post, viewer) edge: {page}"
    );
    let (_, one) = get(&router, "/api/posts/vp1?viewer=ann").await;
    assert_eq!(
        (one["count"].as_i64(), one["viewer_liked"].as_bool()),
        (Some(2), Some(true))
    );

    let (_, first) = get(&router, "/api/posts/vp1/likers?limit=1").await;
    assert_eq!(first["likers"], serde_json::json!(["ann"]), "{first}");
    let next = first["next"].as_str().unwrap().to_owned();
    let (_, rest) = get(
        &router,
        &format!("/api/posts/vp1/likers?limit=10&after={next}"),
    )
    .await;
    assert_eq!(rest["likers"], serde_json::json!(["cat"]), "{rest}");
    assert!(rest["next"].is_null(), "{rest}");
    // Which of a viewer's friends like it: in the order asked, one read unit per edge.
    let (status, friends) = get(
        &router,
        "/api/posts/vp1/likers/among?users=cat,bob,zed,ann,cat",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{friends}");
    assert_eq!(
        friends["users"],
        serde_json::json!(["cat", "bob", "zed", "ann"])
    );
    assert_eq!(
        friends["likers"],
        serde_json::json!(["cat", "ann"]),
        "{friends}"
    );
    assert_eq!(friends["count"], 2, "{friends}");
    let (_, alone) = get(&router, "/api/posts/vp1").await;
    let count_units = alone["read_units"].as_u64().unwrap();
    assert_eq!(
        friends["read_units"].as_u64(),
        Some(count_units + 4),
        "{friends}"
    );

    let (status, bad) = get(&router, "/api/counts?ids=vp1&viewer=has%20space").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("viewer"), "{bad}");
    let (status, bad) = get(&router, "/api/posts/vp1/likers?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    refresher.abort();
}

/// A misspelled parameter is a 400 naming it, in a query string and in a counts body, never an
/// answer without what the caller meant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_parameter_is_named() {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    write_contract_file(&file, 50, 5, 3);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let (router, refresher) = router_over(&t).await;
    let (status, bad) = get(&router, "/api/posts/post-1?sinse=1h").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let e = bad["error"].as_str().unwrap();
    assert!(
        e.contains("unknown field `sinse`") && e.contains("since"),
        "{e}"
    );
    let req = Request::post("/api/counts")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"ids":["post-1"],"sinse":"1h"}"#))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("sinse"));
    refresher.abort();
}

/// One HTTP/1.0 GET over a socket: status code and body.
async fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// The read side as a library entry point: `serve::run` on a listener the caller bound, from
/// its own config (no CLI types), answering with the token it was given until its shutdown
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_side_runs_from_its_own_config() {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 300, 8, 11);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let settings = Settings::load(None, |s| s.data_dir = t.dir.path().to_owned()).unwrap();
    let backend = tally::backend::Backend::open_existing(&settings)
        .await
        .unwrap();
    let token_file = file_in(&t, "token");
    std::fs::write(&token_file, "a-token-of-twenty-chars\n").unwrap();
    let cfg = tally_serve::ServeConfig {
        pending_timeout: Duration::ZERO,
        token: Some(tally_serve::auth::Token::from_file(&token_file).unwrap()),
        half_life: settings.analytics.half_life,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        tally_serve::run(
            listener,
            backend.readers(&settings).await.unwrap(),
            cfg,
            async {
                stopped.await.ok();
            },
        )
        .await
    });
    let (status, _) = http_get(addr, "/api/total", None).await;
    assert_eq!(status, 401, "the token is asked for");
    let (status, body) = http_get(addr, "/api/total", Some("a-token-of-twenty-chars")).await;
    assert_eq!(status, 200, "{body}");
    let total: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(total["total"], exp.counts.values().sum::<i64>(), "{total}");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// Puts every record of `file` into the backend's stream, as fast as it takes them.
async fn replay_all(
    backend: &tally::backend::Backend,
    file: std::path::PathBuf,
) -> tally_recording::replay::Replayed {
    let cfg = tally_recording::replay::ReplayConfig {
        file,
        speed: None,
        rate: 0.0,
        hot: Default::default(),
    };
    tally_recording::replay::replay(backend.stream.as_ref(), &cfg, &(), &Default::default())
        .await
        .unwrap()
}

/// An idle exit armed now (`--until-idle`).
fn armed() -> std::sync::Arc<tally_consumer::worker::IdleExit> {
    let idle = std::sync::Arc::new(tally_consumer::worker::IdleExit::default());
    idle.arm();
    idle
}

/// Replay, the counter and the demo as library entry points, called without clap: a file put by
/// `replay::replay` from its own config and counted by `apps::run_counter` to idle reads back
/// exact, and a `Demo` run from a `DemoConfig` reports every count it checked exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_the_counter_and_the_demo_run_from_their_own_config() {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 300, 8, 13);
    let settings = Settings::load(None, |s| s.data_dir = t.dir.path().to_owned()).unwrap();
    let backend = tally::backend::Backend::open(&settings).await.unwrap();
    let replayed = replay_all(&backend, file).await;
    assert_eq!(replayed.stats.records as usize, exp.lines);
    let run = count_until_idle(&settings, &backend).await;
    assert_eq!(
        run.metrics
            .malformed
            .load(std::sync::atomic::Ordering::Relaxed) as usize,
        exp.malformed
    );
    for (post, n) in &exp.counts {
        let got = backend.counter.post_count(post, None).await.unwrap().total;
        assert_eq!(got, *n, "{post}");
    }

    let demo = tally::demo::Demo::open(&Settings::default().for_demo(false, false), false, false)
        .await
        .unwrap();
    let report = demo
        .run(&tally::demo::DemoConfig {
            events: 2_000,
            baselines: false,
            progress: false,
        })
        .await
        .unwrap();
    let r = &report.json;
    assert!(report.exact && report.off().is_none(), "{r}");
    assert_eq!(r["events"], 2_000);
    assert_eq!(r["posts_wrong"], 0);
    assert_eq!(r["counted_total"], r["expected_total"]);
    assert!(r["posts_checked"].as_u64().unwrap() > 100, "{r}");
    demo.close().await.unwrap();
}

/// The counter run on `backend` until idle, as `tally count --until-idle` runs it.
async fn count_until_idle(
    settings: &Settings,
    backend: &tally::backend::Backend,
) -> tally::apps::CounterRun {
    let (run, shown) = (Default::default(), None);
    let counted = tally::apps::run_counter(settings, backend, armed(), pending(), run, shown);
    counted.await.unwrap()
}

/// How long `run_counter` took, to idle, over a file of 200 likes on 4 shards with a lease poll of
/// `poll` and the join wait `join`: each lease taken once and every count exact, checked.
async fn counted_to_idle(poll: Duration, join: Option<Duration>) -> Duration {
    let t = Target::embedded();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 200, 6, 17);
    let settings = Settings::load(None, |s| {
        s.data_dir = t.dir.path().to_owned();
        s.lease.lease_poll_interval = poll;
        s.lease.join_wait = join;
        s.lease.idle_poll = Duration::from_millis(50);
    })
    .unwrap();
    let backend = tally::backend::Backend::open(&settings).await.unwrap();
    replay_all(&backend, file).await;
    let started = std::time::Instant::now();
    let run = count_until_idle(&settings, &backend).await;
    let took = started.elapsed();
    assert_eq!(
        run.leases.taken.load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    for (post, n) in &exp.counts {
        let got = backend.counter.post_count(post, None).await.unwrap().total;
        assert_eq!(got, *n, "{post}");
    }
    took
}

/// A worker with `lease.join_ms` 0 takes its leases in its first round, not after a poll: with
/// a poll of 10 s (what a joining worker waits when `join_ms` is unset: the test below), this
/// counter ends before 10 s, each lease taken once, every count exact. (The 10 s is the margin a
/// busy machine has: nothing here is a measure of speed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_joins_at_once_takes_its_leases_in_its_first_round() {
    let poll = Duration::from_secs(10);
    let took = counted_to_idle(poll, Some(Duration::ZERO)).await;
    assert!(took < poll, "waited a poll to take the leases: {took:?}");
}

/// `--until-idle` ends when its last shard goes idle, not at the worker's next lease poll: with
/// a poll of 10 s, the round that takes the leases comes at 10 s (the first only joins the
/// fleet) and the next poll at 20 s, so a counter that waited for it would end after 20 s; this
/// one ends soon after 10 s, every count exact. (The 10 s between is the margin a busy machine
/// has: nothing here is a measure of speed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_exit_ends_when_the_last_shard_goes_idle_not_at_the_next_poll() {
    let poll = Duration::from_secs(10);
    let took = counted_to_idle(poll, None).await;
    assert!(
        took >= poll,
        "the leases are taken at the second round: {took:?}"
    );
    assert!(
        took < 2 * poll - Duration::from_millis(500),
        "waited for the poll after the leases were taken: {took:?}"
    );
}
