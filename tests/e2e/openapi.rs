//! The read API's contract: its OpenAPI 3.1 document (`/api/openapi.json`) describes the real
//! answers — every route's answer on a counted store checked against the document's schema, and
//! every error a JSON object naming the parameter at fault — and schemathesis, the property-based
//! API fuzzer (pinned, installed by `scripts/with-api-fuzzer.sh`), finds no server error, no
//! undocumented status and no answer off its schema. With `--auth-token-file` a missing or wrong
//! bearer token is a 401 in JSON, and the probes stay open.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::{json, Value};

use crate::common::{file_in, write_contract_file, Bg, Target};
use crate::serve::{request_with, served_addr};

const TOKEN: &str = "e2e-token-0123456789abcdef";

/// A counted store (retries and malformed records in it: dead letters), analyzed, and its read
/// side serving on 127.0.0.1, asking for `TOKEN` if `token`.
fn served(t: &Target, token: bool) -> (Bg, String) {
    let f = file_in(t, "likes.ndjson");
    write_contract_file(&f, 400, 20, 7);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    t.run(&["analytics", "--until-idle"]);
    let mut args = vec!["serve", "--addr", "127.0.0.1:0"];
    let token_file = t.dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    if token {
        args.extend(["--auth-token-file", token_file.to_str().unwrap()]);
    }
    let serve = t.spawn("serve", &args, &[]);
    let addr = served_addr(&serve);
    (serve, addr)
}

/// A validator of `schema` (a JSON Schema inside the document, its `$ref`s resolved there).
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
    });
    for (k, v) in schema.as_object().unwrap() {
        root[k] = v.clone();
    }
    jsonschema::validator_for(&root).unwrap()
}

/// Checks an answer against what the document says `method path` answers with `status`.
fn conforms(doc: &Value, method: &str, path: &str, status: u16, body: &str) {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is not in the document");
    let response = &op["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {path} answered {status}, which the document does not list: {body}"
    );
    let Some(schema) = response["content"]["application/json"]["schema"].as_object() else {
        return;
    };
    let v: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: not JSON ({e}): {body}"));
    let errors: Vec<String> = validator(doc, &Value::Object(schema.clone()))
        .iter_errors(&v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status} is off its schema: {errors:#?}\n{body}"
    );
}

fn call(addr: &str, method: &str, url: &str, body: Option<&str>, token: bool) -> (u16, String) {
    let auth = format!("Bearer {TOKEN}");
    let headers: Vec<(&str, &str)> = if token {
        vec![("Authorization", auth.as_str())]
    } else {
        vec![]
    };
    let (status, _, body) = request_with(addr, method, url, body, &headers)
        .unwrap_or_else(|| panic!("{method} {url}: no answer"));
    (status, body)
}

fn the_api_answers_as_its_document_says(t: Target) {
    let (_serve, addr) = served(&t, false);
    let (status, text) = call(&addr, "GET", "/api/openapi.json", None, false);
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string("serve/src/openapi.json").unwrap()).unwrap();
    // Counting likers, the document served leaves out what only a store counting events answers.
    let params = file["paths"]["/api/posts/{id}"]["get"]["parameters"]
        .as_array_mut()
        .unwrap();
    assert!(params.iter().any(|p| p["name"] == "as_of_ms"));
    params.retain(|p| p["name"] != "as_of_ms");
    assert_eq!(
        doc, file,
        "the document served is the one in the repository, as a likers store answers it"
    );
    // Every documented operation, answered.
    let ok: &[(&str, &str, &str, Option<&str>)] = &[
        ("get", "/api/posts/{id}", "/api/posts/post-0", None),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/post-1?since=1h&viewer=u1",
            None,
        ),
        (
            "get",
            "/api/posts/{id}/likers",
            "/api/posts/post-0/likers?limit=3",
            None,
        ),
        (
            "get",
            "/api/posts/{id}/likers/among",
            "/api/posts/post-0/likers/among?users=u1,u2,u3",
            None,
        ),
        (
            "get",
            "/api/posts/{id}/likers/recent",
            "/api/posts/post-0/likers/recent?limit=3",
            None,
        ),
        (
            "get",
            "/api/counts",
            "/api/counts?ids=post-0,post-1,nobody&since=30m&viewer=u2",
            None,
        ),
        (
            "get",
            "/api/counts",
            "/api/counts?ids=post-2&consistency=eventual&pending=false",
            None,
        ),
        (
            "post",
            "/api/counts",
            "/api/counts",
            Some(r#"{"ids":["post-0","post-3"],"since":"2h","viewer":"u3"}"#),
        ),
        ("get", "/api/total", "/api/total", None),
        ("get", "/api/trending", "/api/trending?k=3", None),
        ("get", "/api/top-liked", "/api/top-liked?k=3", None),
        ("get", "/api/latency", "/api/latency?since=1h", None),
        ("get", "/api/leases", "/api/leases", None),
        ("get", "/api/leases", "/api/leases?app=analytics", None),
        (
            "get",
            "/api/dead-letters",
            "/api/dead-letters?limit=2",
            None,
        ),
        ("get", "/api/cost", "/api/cost", None),
        ("get", "/metrics", "/metrics", None),
        ("get", "/healthz", "/healthz", None),
        ("get", "/readyz", "/readyz", None),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (method, path, url, body) in ok {
        let (status, text) = call(&addr, &method.to_uppercase(), url, *body, false);
        assert_eq!(status, 200, "{method} {url}: {text}");
        conforms(&doc, method, path, status, &text);
        seen.insert((*method, *path));
    }
    // The answers are not empty where the store is not: counts, likers, a letter, trending.
    let (_, post) = call(&addr, "GET", "/api/posts/post-0", None, false);
    assert!(
        serde_json::from_str::<Value>(&post).unwrap()["count"]
            .as_i64()
            .unwrap()
            > 0
    );
    let (_, letters) = call(&addr, "GET", "/api/dead-letters?limit=2", None, false);
    let letters: Value = serde_json::from_str(&letters).unwrap();
    assert_eq!(
        letters["dead_letters"].as_array().unwrap().len(),
        2,
        "{letters}"
    );
    let (_, page) = call(
        &addr,
        "GET",
        &format!(
            "/api/dead-letters?after={}",
            letters["next"].as_str().unwrap()
        ),
        None,
        false,
    );
    conforms(&doc, "get", "/api/dead-letters", 200, &page);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            assert!(
                seen.contains(&(method.as_str(), path.as_str())) || path == "/api/openapi.json",
                "{method} {path} is documented and not checked here"
            );
        }
    }
    // Errors: JSON, of the documented status and schema, naming the parameter at fault.
    let bad: &[(&str, &str, &str, Option<&str>, &str)] = &[
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p%201",
            None,
            "post_id",
        ),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p1?sinse=1h",
            None,
            "sinse",
        ),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p1?since=yesterday",
            None,
            "`since`",
        ),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p1?since_ms=-1",
            None,
            "`since_ms`",
        ),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p1?as_of_ms=99999999999999999",
            None,
            "as_of_ms",
        ),
        (
            "get",
            "/api/posts/{id}",
            "/api/posts/p1?as_of_ms=1796000000000",
            None,
            "counts likers",
        ),
        (
            "get",
            "/api/posts/{id}/likers",
            "/api/posts/p1/likers?limit=0",
            None,
            "`limit`",
        ),
        (
            "get",
            "/api/posts/{id}/likers/among",
            "/api/posts/p1/likers/among?users=u1,has%20space",
            None,
            "`users`",
        ),
        (
            "get",
            "/api/posts/{id}/likers/recent",
            "/api/posts/p1/likers/recent?after=u1",
            None,
            "`after`",
        ),
        ("get", "/api/counts", "/api/counts?ids=", None, "`ids`"),
        (
            "get",
            "/api/counts",
            "/api/counts?ids=p1&consistency=maybe",
            None,
            "consistency",
        ),
        (
            "post",
            "/api/counts",
            "/api/counts",
            Some(r#"{"ids":["p1"],"sinse":"1h"}"#),
            "sinse",
        ),
        ("post", "/api/counts", "/api/counts", Some("[1,2]"), "ids"),
        ("get", "/api/trending", "/api/trending?k=0", None, "`k`"),
        ("get", "/api/top-liked", "/api/top-liked?k=abc", None, "k"),
        (
            "get",
            "/api/latency",
            "/api/latency?since_ms=-5",
            None,
            "`since_ms`",
        ),
        (
            "get",
            "/api/leases",
            "/api/leases?app=billing",
            None,
            "`app`",
        ),
        (
            "get",
            "/api/dead-letters",
            "/api/dead-letters?after=not%20a%20cursor",
            None,
            "`after`",
        ),
    ];
    for (method, path, url, body, names) in bad {
        let (status, text) = call(&addr, &method.to_uppercase(), url, *body, false);
        assert_eq!(status, 400, "{method} {url}: {text}");
        conforms(&doc, method, path, status, &text);
        let error = serde_json::from_str::<Value>(&text).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(error.contains(names), "{url}: {error:?} names {names}");
    }
}

on_backends! {
    the_api_answers_as_its_document_says {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            the_api_answers_as_its_document_says(t);
        },
        aws => the_api_answers_as_its_document_says(Target::aws("openapi", 2)),
    }
}

/// With a token, a request without it, or with another, is a 401 in JSON (and says how to send
/// it); with it, the answer; the probes and the document stay open.
#[test]
fn the_api_asks_for_its_token() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let (_serve, addr) = served(&t, true);
    let doc: Value =
        serde_json::from_str(&call(&addr, "GET", "/api/openapi.json", None, false).1).unwrap();
    for (headers, why) in [
        (vec![], "asks for a bearer token"),
        (
            vec![("Authorization", "Bearer not-the-token-at-all-000")],
            "not this API's",
        ),
        (vec![("Authorization", TOKEN)], "asks for a bearer token"),
    ] {
        for url in [
            "/api/total",
            "/api/counts?ids=post-0",
            "/metrics",
            "/api/leases",
        ] {
            let (status, head, body) = request_with(&addr, "GET", url, None, &headers).unwrap();
            assert_eq!(status, 401, "{url} with {headers:?}: {body}");
            assert!(head.contains("www-authenticate: bearer"), "{head}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert!(v["error"].as_str().unwrap().contains(why), "{body}");
        }
        let path = "/api/total";
        let (status, _, body) = request_with(&addr, "GET", path, None, &headers).unwrap();
        conforms(&doc, "get", path, status, &body);
    }
    let (status, text) = call(&addr, "GET", "/api/total", None, true);
    assert_eq!(status, 200, "{text}");
    for open in ["/healthz", "/readyz", "/api/openapi.json", "/"] {
        let (status, text) = call(&addr, "GET", open, None, false);
        assert_eq!(status, 200, "{open}: {text}");
    }
    // A token too short to protect anything is refused at start, naming the flag.
    let short = t.dir.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    let out = t.fail(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--auth-token-file",
            short.to_str().unwrap(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--auth-token-file") && err.contains("at least 16"),
        "{err}"
    );
}

/// schemathesis against the served document, every check: examples, coverage of every
/// parameter's edges, fuzzing and stateful sequences — no 5xx, no status or content type the
/// document does not list, no answer off its schema (a 4xx's included: a JSON error), every
/// request the document admits taken and every one it does not refused, and the token asked.
fn the_fuzzer_finds_no_fault(t: Target) {
    let (_serve, addr) = served(&t, true);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/with-api-fuzzer.sh"))
        .args([
            "st",
            "run",
            &format!("http://{addr}/api/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {TOKEN}"),
            "--checks",
            "all",
            "--max-examples",
            "40",
            // One worker: several hit a CPython 3.11 AST race inside the fuzzer (its bug, not ours).
            "--workers",
            "1",
            "--seed",
            "20261202",
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .env("NO_COLOR", "1")
        .current_dir(t.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found faults:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("No issues found"), "{text}");
}

on_backends! {
    the_fuzzer_finds_no_fault_in_the_api {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            the_fuzzer_finds_no_fault(t);
        },
        aws => the_fuzzer_finds_no_fault(Target::aws("fuzz", 2)),
    }
}

/// Where a contract fuzzer with every check found the served API looser or stricter than its
/// document (issue 74, item 8), each case pinned: the bearer scheme asked of every guarded
/// operation (`likers/among` too) and matched ignoring case; `after`, `users` and a JSON body's
/// `since_ms` taken exactly as the document states them; a path that is not text, a query string
/// where the document lists no parameter (beside a POST body too) a JSON 400; 414 and 431 in the
/// document; and, on a store counting events, a document without the likers routes and `viewer`.
#[test]
fn the_api_is_exactly_as_loose_as_its_document() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let (_serve, addr) = served(&t, true);
    let doc: Value =
        serde_json::from_str(&call(&addr, "GET", "/api/openapi.json", None, false).1).unwrap();
    let open = ["/healthz", "/readyz", "/api/openapi.json"];
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let bearer = op["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
            assert_eq!(
                bearer,
                !open.contains(&path.as_str()),
                "{method} {path}: {op}"
            );
            for status in ["414", "431"] {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} {status}"
                );
            }
        }
    }
    let among = "/api/posts/post-1/likers/among?users=u1";
    assert_eq!(call(&addr, "GET", among, None, false).0, 401);
    let lower = format!("bearer {TOKEN}");
    let (status, _, body) = request_with(
        &addr,
        "GET",
        "/api/total",
        None,
        &[("Authorization", &lower)],
    )
    .unwrap();
    assert_eq!(status, 200, "the scheme's name ignores case: {body}");

    let refused = |method: &str, url: &str, body: Option<&str>, names: &str| {
        let (status, text) = call(&addr, method, url, body, true);
        assert_eq!(status, 400, "{method} {url}: {text}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {url}: not JSON ({e}): {text}"));
        assert!(
            v["error"].as_str().unwrap().contains(names),
            "{method} {url}: {text}"
        );
    };
    for after in [
        "-5:u1",
        "+5:u1",
        "1234567890123456789:u1",
        "1234567890123456789012:u1",
    ] {
        let url = format!("/api/posts/post-1/likers/recent?after={after}");
        refused("GET", &url, None, "after");
    }
    let users = |n: usize, distinct: bool| -> String {
        (0..n)
            .map(|i| {
                if distinct {
                    format!("u{i}")
                } else {
                    "u1".into()
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    for (n, distinct) in [(101, true), (101, false), (500, false)] {
        let url = format!(
            "/api/posts/post-1/likers/among?users={}",
            users(n, distinct)
        );
        refused("GET", &url, None, "users");
    }
    let url = format!("/api/posts/post-1/likers/among?users={}", users(100, false));
    assert_eq!(call(&addr, "GET", &url, None, true).0, 200);
    refused(
        "POST",
        "/api/counts",
        Some(r#"{"ids":["post-1"],"since_ms":"732"}"#),
        "since_ms",
    );
    let (status, _) = call(
        &addr,
        "POST",
        "/api/counts",
        Some(r#"{"ids":["post-1"],"since_ms":732}"#),
        true,
    );
    assert_eq!(status, 200);
    refused("GET", "/api/posts/%FF", None, "path");
    for url in [
        "/api/total?x=1",
        "/api/cost?x=1",
        "/metrics?x=1",
        "/healthz?x=1",
        "/readyz?x=1",
    ] {
        refused("GET", url, None, "x=1");
    }
    refused(
        "POST",
        "/api/counts?x=1",
        Some(r#"{"ids":["post-1"]}"#),
        "x=1",
    );
    // A request line longer than the HTTP layer takes: its 414, as documented.
    let long = format!("/api/counts?ids={}", "p".repeat(70_000));
    let (status, _) = call(&addr, "GET", &long, None, true);
    assert_eq!(status, 414);

    // A store counting events serves a document without what it refuses.
    let e = Target::embedded().counting_events();
    e.run(&["setup", "--shards", "1"]);
    let (_serve, addr) = served(&e, false);
    let doc: Value =
        serde_json::from_str(&call(&addr, "GET", "/api/openapi.json", None, false).1).unwrap();
    let text = doc["paths"].to_string();
    assert!(!text.contains("/likers"), "{text}");
    assert!(!text.contains(r#""name":"viewer""#), "{text}");
    assert!(
        doc["components"]["schemas"]["CountsRequest"]["properties"]["viewer"].is_null(),
        "{doc}"
    );
    // Nor does it mount them: who likes what is asked only of a store that keeps it.
    for path in ["likers", "likers/among?users=u1", "likers/recent"] {
        let (status, text) = call(
            &addr,
            "GET",
            &format!("/api/posts/post-1/{path}"),
            None,
            false,
        );
        assert_eq!(status, 404, "{path}: {text}");
        assert!(text.contains("keeps no likers"), "{path}: {text}");
    }
}
