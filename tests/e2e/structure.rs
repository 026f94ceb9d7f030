//! The structural invariants ARCHITECTURE.md states, held by reading the tree (no build of
//! anything): the core depends on no runtime, SDK or database; the apps name no adapter; the
//! counter and analytics are siblings on the consumer runtime, neither depending on the other; in
//! the binary only `src/backend.rs` names an adapter, and nothing but the dispatcher imports the
//! commands.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crate names under a manifest's `[dependencies]` (not dev- or build-dependencies).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            inside = l == "[dependencies]";
            continue;
        }
        if inside && !l.is_empty() && !l.starts_with('#') {
            out.push(l.split(['=', '.', ' ']).next().unwrap().trim().to_owned());
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_core_depends_on_no_runtime_sdk_or_database() {
    let deps = dependencies(&root().join("core/Cargo.toml"));
    assert!(!deps.is_empty());
    for d in &deps {
        assert!(
            !(d.starts_with("tokio")
                || d.starts_with("aws-")
                || d == "rusqlite"
                || d.starts_with("tally-")),
            "tally-core depends on {d}"
        );
    }
}

#[test]
fn the_apps_name_no_adapter() {
    for app in ["producer", "consumer", "counter", "analytics"] {
        let deps = dependencies(&root().join(app).join("Cargo.toml"));
        for adapter in [
            "tally-aws",
            "tally-embedded",
            "aws-sdk-kinesis",
            "aws-sdk-dynamodb",
            "rusqlite",
        ] {
            assert!(
                !deps.iter().any(|d| d == adapter),
                "{app} depends on {adapter}"
            );
        }
    }
}

#[test]
fn the_counter_and_analytics_are_siblings_on_the_runtime() {
    let runtime = dependencies(&root().join("consumer/Cargo.toml"));
    assert!(
        !runtime
            .iter()
            .any(|d| d.starts_with("tally-") && d != "tally-core"),
        "the runtime depends on an application: {runtime:?}"
    );
    for (app, other) in [
        ("counter", "tally-analytics"),
        ("analytics", "tally-counter"),
    ] {
        let deps = dependencies(&root().join(app).join("Cargo.toml"));
        assert!(
            deps.iter().any(|d| d == "tally-consumer"),
            "{app} is not on the runtime"
        );
        assert!(!deps.iter().any(|d| d == other), "{app} depends on {other}");
    }
}

#[test]
fn only_the_backend_module_names_an_adapter() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    assert!(files.len() > 10);
    let named: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("src/backend.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("tally_aws") || text.contains("tally_embedded")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        named.is_empty(),
        "adapters named outside src/backend.rs: {named:?}"
    );
}

/// The commands are thin adapters: nothing imports them but the dispatcher (`src/lib.rs`) — not
/// the read side, verify, the stream reading, the benches or the tests — and the read side
/// (`src/serve/`) names no command.
#[test]
fn nothing_imports_the_commands() {
    let mut files = Vec::new();
    for dir in ["src", "benches", "tests"] {
        rust_files(&root().join(dir), &mut files);
    }
    let commands = root().join("src/commands");
    let importers: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(&commands) && !f.ends_with("src/lib.rs"))
        .filter(|f| !f.ends_with("tests/e2e/structure.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("commands::") || text.contains("mod commands")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(importers.is_empty(), "commands imported by {importers:?}");
}
