//! Helpers for the end-to-end tests: run the `tally` binary against a backend, and write NDJSON
//! files against contract v1 independently of tally's own generator.
#![allow(clippy::unwrap_used)]
// The local AWS peers' helpers go unused when the tests are built without them.
#![cfg_attr(not(feature = "aws-local"), allow(dead_code))]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub mod fault_proxy;
pub mod iam;
#[cfg(feature = "aws-local")]
pub mod replicator;

/// Where a test's data lives: a temp dir (embedded) or fresh stream/table names (AWS).
pub struct Target {
    /// Global flags selecting the backend.
    pub args: Vec<String>,
    /// Kept alive for the test's duration.
    pub dir: tempfile::TempDir,
    /// Delete the stream and tables when the test ends (the local peers cap shards in total).
    pub teardown: bool,
    /// Environment of every command (settings as `TALLY_*` variables).
    pub env: Vec<(String, String)>,
    /// With enhanced fan-out: the proxy every Kinesis call goes through, to see which were made.
    pub kinesis_proxy: Option<fault_proxy::FaultProxy>,
}

impl Target {
    /// The same target, counting events instead of likers (`counter.count = "events"`): for
    /// what is about events — the duplicate filter, a window's deltas known as it is read.
    pub fn counting_events(mut self) -> Target {
        self.env
            .push(("TALLY_COUNTER__COUNT".into(), "events".into()));
        self
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.teardown {
            // Best effort: a failed teardown leaves only uniquely named resources behind.
            let _ = self.cmd(&["teardown", "--yes"]).output();
        }
    }
}

/// The setting that gives a store its recent index (likers most recent first).
pub const RECENT_INDEX_VAR: &str = "TALLY_RECENT_LIKERS_INDEX";

impl Target {
    /// A fresh embedded data dir.
    pub fn embedded() -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        let args = vec!["--data-dir".into(), dir.path().display().to_string()];
        Target {
            args,
            dir,
            teardown: false,
            // Likers most recent first are asked of every backend.
            env: vec![(RECENT_INDEX_VAR.into(), "true".into())],
            kinesis_proxy: None,
        }
    }

    /// Another store of the same backend, reading the same stream on AWS (its own tables, by
    /// another prefix) — where a rebuild writes. Its tables are created by the first command
    /// that needs them.
    pub fn other_store(&self, suffix: &str) -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut args = self.args.clone();
        for (i, flag) in self.args.iter().enumerate() {
            match flag.as_str() {
                "--data-dir" => args[i + 1] = dir.path().display().to_string(),
                "--table-prefix" => args[i + 1] = format!("{}-{suffix}", self.args[i + 1]),
                _ => {}
            }
        }
        Target {
            args,
            dir,
            teardown: self.teardown,
            env: self.env.clone(),
            kinesis_proxy: None,
        }
    }

    /// The same target with these global flags on every command (`--config FILE`).
    pub fn with_args(mut self, extra: &[&str]) -> Target {
        self.args.extend(extra.iter().map(|a| (*a).to_owned()));
        self
    }

    /// The same stream and store, without the extra flags `with_args` gave (a `--config FILE`):
    /// what the store holds read as it is. The original target tears them down.
    pub fn plain(&self, extra: &[&str]) -> Target {
        let mut args = self.args.clone();
        if let Some(i) = args.iter().position(|a| a == extra[0]) {
            args.drain(i..i + extra.len());
        }
        self.view(args)
    }

    /// Another handle on the same stream and store with these flags: nothing of its own to tear
    /// down (the original target does).
    fn view(&self, args: Vec<String>) -> Target {
        Target {
            args,
            dir: tempfile::tempdir().expect("temp dir"),
            teardown: false,
            env: self.env.clone(),
            kinesis_proxy: None,
        }
    }

    /// The same target whose commands no longer set `var` (before its store is made: a setting
    /// `setup` reads).
    pub fn without_env(mut self, var: &str) -> Target {
        self.env.retain(|(k, _)| k != var);
        self
    }

    /// Fresh stream and tables (`shards` shards) on the local AWS API peers, started by
    /// `scripts/local-aws.sh`.
    pub fn aws(name: &str, shards: usize) -> Target {
        // Likers most recent first are asked of every backend.
        Target::aws_with(name, shards, &[(RECENT_INDEX_VAR, "true")])
    }

    /// As [`Target::aws`], set up with these settings only (`TALLY_*` variables, kept for every
    /// command): without the counts table's recent index unless they ask for it.
    pub fn aws_with(name: &str, shards: usize, env: &[(&str, &str)]) -> Target {
        let kinesis = std::env::var("TEST_KINESIS_ENDPOINT")
            .unwrap_or_else(|_| "http://127.0.0.1:4568".into());
        let dynamodb = std::env::var("TEST_DYNAMODB_ENDPOINT")
            .unwrap_or_else(|_| "http://127.0.0.1:8000".into());
        let mut t = Target::aws_at(name, &kinesis, &dynamodb);
        t.env
            .extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        t.run(&["setup", "--shards", &shards.to_string()]);
        t.teardown = true;
        t
    }

    /// As [`Target::aws`], with both applications reading by enhanced fan-out, their Kinesis calls
    /// going through a proxy so that [`Target::assert_read_as_configured`] can see them.
    pub fn aws_efo(name: &str, shards: usize) -> Target {
        let kinesis = std::env::var("TEST_KINESIS_ENDPOINT")
            .unwrap_or_else(|_| "http://127.0.0.1:4568".into());
        let dynamodb = std::env::var("TEST_DYNAMODB_ENDPOINT")
            .unwrap_or_else(|_| "http://127.0.0.1:8000".into());
        let proxy = fault_proxy::FaultProxy::start(&kinesis);
        let mut t = Target::aws_at(name, &proxy.url, &dynamodb);
        t.kinesis_proxy = Some(proxy);
        for app in ["COUNTER", "ANALYTICS"] {
            t.env
                .push((format!("TALLY_{app}__READ_MODE"), "efo".to_owned()));
        }
        t.run(&["setup", "--shards", &shards.to_string()]);
        t.teardown = true;
        t
    }

    /// With enhanced fan-out, that the shards were read by subscriptions, not by polling after a
    /// silent fallback: SubscribeToShard was called, and GetRecords only ever asked for one
    /// record (the reader's "has this shard ended?" question), never polled.
    pub fn assert_read_as_configured(&self) {
        let Some(p) = &self.kinesis_proxy else {
            return;
        };
        let (subscribed, polled) = (p.seen("SubscribeToShard"), p.seen("GetRecords:poll"));
        assert!(
            p.seen("RegisterStreamConsumer") > 0 && subscribed > 0 && polled == 0,
            "not read by enhanced fan-out: {subscribed} subscriptions, {polled} polling GetRecords"
        );
    }

    /// Fresh stream and table names at these endpoints, not yet created.
    pub fn aws_at(name: &str, kinesis: &str, dynamodb: &str) -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        let unique = format!("{name}-{}-{}", std::process::id(), now_ms() % 1_000_000_000);
        let args = vec![
            "--backend".into(),
            "aws".into(),
            "--stream".into(),
            format!("s-{unique}"),
            "--table-prefix".into(),
            format!("t-{unique}"),
            "--kinesis-endpoint-url".into(),
            kinesis.to_owned(),
            "--dynamodb-endpoint-url".into(),
            dynamodb.to_owned(),
            "--data-dir".into(),
            dir.path().display().to_string(),
        ];
        Target {
            args,
            dir,
            teardown: false,
            env: Vec::new(),
            kinesis_proxy: None,
        }
    }

    /// The same stream and tables reached at other endpoints (a proxy in front of the peers);
    /// the original target tears them down.
    pub fn through(&self, kinesis: &str, dynamodb: &str) -> Target {
        let mut args = self.args.clone();
        for (flag, url) in [
            ("--kinesis-endpoint-url", kinesis),
            ("--dynamodb-endpoint-url", dynamodb),
        ] {
            let i = args.iter().position(|a| a == flag).expect("an AWS target");
            args[i + 1] = url.to_owned();
        }
        self.view(args)
    }

    /// Whether this target is the AWS one.
    pub fn is_aws(&self) -> bool {
        self.args.iter().any(|a| a == "aws")
    }

    /// A `tally` command with this target's flags and the test AWS credentials. The binary is
    /// this build's, or the one `E2E_TALLY_BIN` names (to run a test against another build, e.g.
    /// to show that it fails on the code before a fix).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(tally_bin());
        c.args(args).args(&self.args);
        c.env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1");
        c.env_remove("AWS_PROFILE").env("RUST_LOG", "warn");
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null());
        c
    }

    /// Runs `tally ARGS` with extra env vars; panics with its output if it fails.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = output(c);
        assert!(
            out.status.success(),
            "tally {args:?} failed: {}\nstdout: {}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn run(&self, args: &[&str]) -> String {
        self.run_env(args, &[])
    }

    /// Runs `tally ARGS`, expecting failure; returns its output.
    pub fn fail(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = output(c);
        assert!(
            !out.status.success(),
            "tally {args:?} should have failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        out
    }

    pub fn json(&self, args: &[&str]) -> Value {
        self.json_env(args, &[])
    }

    pub fn json_env(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        let out = self.run_env(args, env);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("tally {args:?} printed no JSON ({e}): {out}"))
    }

    /// `tally query ONE_ID … --json` (its one shape, `{"counts": [..], ..}`, checked to hold one
    /// post): the post's answer, with the answer's other fields (`applied_through`, `viewer`,
    /// `since_requested_ms`, ..) beside its own.
    pub fn query_one(&self, args: &[&str]) -> Value {
        let v = self.json(args);
        let counts = v["counts"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(counts.len(), 1, "{v}");
        let mut one = counts[0].clone();
        for (k, field) in v.as_object().unwrap() {
            if k != "counts" && one.get(k).is_none() {
                one[k] = field.clone();
            }
        }
        one
    }

    /// A post's count through `tally query --json`.
    pub fn count(&self, post: &str) -> i64 {
        self.query_one(&["query", post, "--json"])["count"]
            .as_i64()
            .expect("count")
    }

    /// Every post's count, checked against `expected`; returns the mismatches.
    pub fn mismatches(&self, expected: &BTreeMap<String, i64>) -> Vec<(String, i64, i64)> {
        expected
            .iter()
            .filter_map(|(p, &e)| {
                let got = self.count(p);
                (got != e).then_some((p.clone(), e, got))
            })
            .collect()
    }
}

/// How long one command may run before the test fails (a hang is a failure, not a stall).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// The `tally` binary the tests run: this build's, or the one `E2E_TALLY_BIN` names (to run a
/// test against another build, e.g. to show that it fails on the code before a fix, or against a
/// copy while the tree is rebuilt).
pub fn tally_bin() -> std::ffi::OsString {
    std::env::var_os("E2E_TALLY_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_tally").into())
}

/// Runs a command to completion, killing it (and failing) past [`COMMAND_TIMEOUT`].
pub fn output(mut c: Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tally");
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut b).ok();
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut b).ok();
        b
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > COMMAND_TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "{c:?} did not finish within {COMMAND_TIMEOUT:?}; stderr: {}",
                String::from_utf8_lossy(&t_err.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

/// A background `tally` process whose stderr goes to a file.
pub struct Bg {
    pub child: std::process::Child,
    pub log: PathBuf,
}

impl Bg {
    /// Sends a signal by PID (only to the process this test started).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} {}", self.child.id());
    }

    /// Waits until a `STOP` sent to the process has stopped it (Linux: its state in
    /// `/proc/<pid>/stat`; elsewhere a short sleep).
    pub fn wait_stopped(&self) {
        let stat = format!("/proc/{}/stat", self.child.id());
        for _ in 0..200 {
            match std::fs::read_to_string(&stat) {
                // The state follows the command's name in parentheses.
                Ok(s) if s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')) => return,
                Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return std::thread::sleep(Duration::from_millis(100)),
            }
        }
        panic!("process {} did not stop", self.child.id());
    }

    /// Waits for the process to exit, failing the test past `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s;
            }
            if start.elapsed() > timeout {
                self.child.kill().ok();
                panic!(
                    "process {} did not exit within {timeout:?}; log:\n{}",
                    self.child.id(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

impl Target {
    /// Starts `tally ARGS` in the background with extra env vars.
    pub fn spawn(&self, name: &str, args: &[&str], env: &[(&str, &str)]) -> Bg {
        let log = self.dir.path().join(format!("{name}.log"));
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.env("RUST_LOG", "info");
        c.env("NO_COLOR", "1");
        let f = std::fs::File::create(&log).expect("log file");
        let child = c
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("spawn tally");
        Bg { child, log }
    }

    /// Polls `f` until it holds; past `timeout` the test fails with these processes' logs and
    /// the leases.
    pub fn eventually(
        &self,
        what: &str,
        timeout: Duration,
        logs: &[&Bg],
        mut f: impl FnMut() -> bool,
    ) {
        let start = Instant::now();
        while !f() {
            if start.elapsed() >= timeout {
                let mut report = format!("timed out waiting for {what}");
                for bg in logs {
                    report += &format!("\n--- log of {}:\n{}", bg.log.display(), bg.log_text());
                }
                let leases = self.cmd(&["leases", "--json"]).output();
                if let Ok(o) = leases {
                    report += &format!("\n--- leases:\n{}", String::from_utf8_lossy(&o.stdout));
                }
                panic!("{report}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What a hand-written contract-v1 file should count to.
#[derive(Debug, Default)]
pub struct Expected {
    pub counts: BTreeMap<String, i64>,
    /// Per post: its likers whose like was created in the last 30 minutes (none between 30 min
    /// and 2 h).
    pub recent: BTreeMap<String, i64>,
    pub lines: usize,
    pub malformed: usize,
    pub duplicates: usize,
}

impl Expected {
    pub fn total(&self) -> i64 {
        self.counts.values().sum()
    }
}

/// Writes `n` events over `posts` posts to `path` as someone else's producer would: its own ids,
/// extra fields, unlikes, verbatim retries and malformed lines. A small LCG keeps it reproducible.
/// Runs `tally count --until-idle` once per delay (workers w0 and w1 in turn, with `env`) and
/// SIGKILLs it after that many milliseconds (times `slower`) if it still runs; returns how many
/// runs were killed. A fixed schedule keeps a failure reproducible.
pub fn count_killed_at(t: &Target, delays: &[u64], slower: u64, env: &[(&str, &str)]) -> usize {
    let mut killed = 0;
    for (i, d) in delays.iter().enumerate() {
        let mut c = t.cmd(&[
            "count",
            "--until-idle",
            "--worker-id",
            &format!("w{}", i % 2),
        ]);
        c.envs(env.iter().copied());
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(*d * slower));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed += 1;
        }
        child.wait().unwrap();
    }
    killed
}

/// The malformed lines a contract file holds, in turn: how a test knows them without tally's
/// decoder.
pub const MALFORMED_LINES: [&str; 6] = [
    "not json at all",
    r#"{"event_id":"m1","post_id":"post-1","user_id":"u1","action":"love","created_at":1}"#,
    r#"{"event_id":"m2","post_id":"post 1","user_id":"u1","action":"like","created_at":1}"#,
    r#"{"event_id":"m3","post_id":"post-1","user_id":"u1","action":"like","created_at":"yesterday"}"#,
    r#"{"post_id":"post-2","user_id":"u1","action":"like","created_at":1}"#,
    "[1,2,3]",
];

pub fn write_contract_file(path: &Path, n: usize, posts: usize, seed: u64) -> Expected {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut rnd = move |m: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    let now = now_ms();
    let mut exp = Expected::default();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut recent_lines: Vec<String> = Vec::new();
    // Each post's likers, with when they liked: a user likes a post they do not like yet and
    // unlikes one they like, later than they liked it, so that distinct events and likers agree.
    let mut likers: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
    // Each (post, user)'s last action's time: the next is created after it.
    let mut last: BTreeMap<(String, u64), i64> = BTreeMap::new();
    for i in 0..n {
        if i % 97 == 13 {
            writeln!(f, "{}", MALFORMED_LINES[(i / 97) % MALFORMED_LINES.len()]).unwrap();
            exp.malformed += 1;
            exp.lines += 1;
        }
        if i % 41 == 7 && !recent_lines.is_empty() {
            let l = recent_lines[rnd(recent_lines.len() as u64) as usize].clone();
            writeln!(f, "{l}").unwrap();
            exp.duplicates += 1;
            exp.lines += 1;
        }
        // Skewed popularity: half the events go to the first 5 posts.
        let post = if rnd(2) == 0 {
            rnd(5.min(posts as u64))
        } else {
            rnd(posts as u64)
        };
        let post = format!("post-{post}");
        let recent = rnd(3) != 0;
        let created = if recent {
            now - 1_000 - rnd(25 * 60_000) as i64
        } else {
            now - 3 * 3_600_000 - rnd(3_600_000) as i64
        };
        let of_post = likers.entry(post.clone()).or_default();
        let unlike = !of_post.is_empty() && rnd(8) == 0;
        let (user, created) = if unlike {
            let (user, _) = of_post.swap_remove(rnd(of_post.len() as u64) as usize);
            (user, created)
        } else {
            let mut user = rnd(10_000);
            while of_post.iter().any(|(u, _)| *u == user) {
                user = rnd(10_000);
            }
            (user, created)
        };
        let created = match last.get(&(post.clone(), user)) {
            Some(&before) => created.max(before + 1),
            None => created,
        };
        last.insert((post.clone(), user), created);
        if !unlike {
            of_post.push((user, created));
        }
        let action = if unlike { "unlike" } else { "like" };
        let line = format!(
            r#"{{"created_at":{created},"action":"{action}","user_id":"user_{seed}-{user}","post_id":"{post}","event_id":"ext-{seed}-{i}","client":{{"app":"ios","v":3}}}}"#
        );
        writeln!(f, "{line}").unwrap();
        exp.lines += 1;
        let d = if unlike { -1 } else { 1 };
        *exp.counts.entry(post.clone()).or_default() += d;
        recent_lines.push(line);
        if recent_lines.len() > 200 {
            recent_lines.remove(0);
        }
    }
    for (post, of_post) in likers {
        let n = of_post
            .iter()
            .filter(|(_, at)| *at > now - 3_600_000)
            .count() as i64;
        if n > 0 {
            exp.recent.insert(post, n);
        }
    }
    exp
}

/// A DynamoDB client of the local peer (`TEST_DYNAMODB_ENDPOINT`, else 127.0.0.1:8000), for tests
/// that read or edit the tables as an app or an operator would, without tally's code.
pub fn dynamodb_client() -> aws_sdk_dynamodb::Client {
    let dynamodb =
        std::env::var("TEST_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into());
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(dynamodb)
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

impl Target {
    /// The value of one of the target's global flags (`--stream`, `--table-prefix`, …).
    pub fn flag(&self, name: &str) -> Option<String> {
        let i = self.args.iter().position(|a| a == name)?;
        self.args.get(i + 1).cloned()
    }

    /// A table's full name on AWS (`<prefix>-<name>`).
    pub fn table(&self, name: &str) -> String {
        format!("{}-{name}", self.flag("--table-prefix").unwrap())
    }

    /// The AWS adapter's settings for the target's stream and tables on the local peers, with
    /// the local peers' test credentials in the environment (set once, before any client).
    pub fn aws_settings(&self) -> tally_aws::AwsSettings {
        static CREDENTIALS: std::sync::Once = std::sync::Once::new();
        CREDENTIALS.call_once(|| {
            for (k, v) in [
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_REGION", "us-east-1"),
            ] {
                if std::env::var(k).is_err() {
                    std::env::set_var(k, v);
                }
            }
        });
        tally_aws::AwsSettings {
            stream: self.flag("--stream").unwrap(),
            table_prefix: self.flag("--table-prefix").unwrap(),
            kinesis_endpoint_url: self.flag("--kinesis-endpoint-url"),
            dynamodb_endpoint_url: self.flag("--dynamodb-endpoint-url"),
            stream_retention_hours: 24,
            recent_likers_index: false,
        }
    }
}

/// A path inside the target's temp dir.
pub fn file_in(t: &Target, name: &str) -> PathBuf {
    t.dir.path().join(name)
}

/// `n` likes over ten posts named `<prefix>-p<k>`, each with its own event id, created now; their
/// counts.
pub fn write_likes(path: &std::path::Path, prefix: &str, n: usize) -> BTreeMap<String, i64> {
    let mut f = std::fs::File::create(path).unwrap();
    let mut counts = BTreeMap::new();
    let now = now_ms();
    for i in 0..n {
        let post = format!("{prefix}-p{}", i % 10);
        writeln!(
            f,
            r#"{{"event_id":"{prefix}-{i}","post_id":"{post}","user_id":"u{i}","action":"like","created_at":{now}}}"#
        )
        .unwrap();
        *counts.entry(post).or_insert(0) += 1;
    }
    counts
}

/// One test per backend of a scenario: `on_backends! { name { embedded => …, aws => …, aws_efo
/// => … } }` makes a module `name` with a test per backend named (`name::embedded`, `name::aws`,
/// `name::aws_efo`), each running its expression — most often the scenario's function on a fresh
/// `Target`. The AWS ones are compiled with the local peers only (`--features aws-local`).
macro_rules! on_backends {
    ($name:ident { $($backend:ident => $body:expr),+ $(,)? }) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $( on_backends!(@test $backend $body); )+
        }
    };
    (@test embedded $body:expr) => {
        #[test]
        fn embedded() {
            $body;
        }
    };
    (@test aws $body:expr) => {
        #[cfg(feature = "aws-local")]
        #[test]
        fn aws() {
            $body;
        }
    };
    (@test aws_efo $body:expr) => {
        #[cfg(feature = "aws-local")]
        #[test]
        fn aws_efo() {
            $body;
        }
    };
}

/// A counter run's `counted` and `duplicates` (`count --json`) over `valid` well-formed records of
/// which `copies` were verbatim copies: counting likers no filter remembers ids across windows
/// (a copy changes nothing wherever it lands), so a copy is a duplicate only when met in its
/// original's window, and counted otherwise; together they are every valid record read.
pub fn assert_read_all(c: &Value, valid: usize, copies: usize) {
    let counted = c["counted"].as_u64().unwrap_or_else(|| panic!("{c}"));
    let dups = c["duplicates"].as_u64().unwrap_or_else(|| panic!("{c}"));
    assert_eq!(counted + dups, valid as u64, "{c}");
    assert!(dups <= copies as u64, "{c}");
}
