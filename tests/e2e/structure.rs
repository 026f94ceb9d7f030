//! The structural invariants ARCHITECTURE.md states, held by reading the tree (no build of
//! anything): the core depends on no runtime, SDK or database; the apps name no adapter; the
//! counter and analytics are siblings on the consumer runtime, neither depending on the other; in
//! the binary only `src/backend.rs` names an adapter, nothing but the dispatcher imports the
//! commands, the read side names no port that writes, and no two files of a crate import each
//! other, directly or around a loop.
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

/// The read side holds no writer: `serve/src/` names only the reader ports (`Readers`:
/// `CountReader`, `DeadLetterReader`, `LeaseReader`, `AnalyticsReader`), never a port that
/// writes nor the backend that holds them all — so its read-only IAM role is matched by code the
/// compiler keeps read-only.
#[test]
fn the_read_side_holds_no_writer() {
    let mut files = Vec::new();
    rust_files(&root().join("serve/src"), &mut files);
    assert!(files.len() > 5);
    let writers = [
        "CounterStore",
        "WindowWriter",
        "StoreMeta",
        "Claims",
        "LeaseStore",
        "AnalyticsStore",
        "DedupStore",
        "BaselineWriters",
        "dyn Stream",
        "Backend",
    ];
    let mut named = Vec::new();
    for f in &files {
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        for w in writers {
            let found = code.match_indices(w).any(|(i, _)| {
                let after = code[i + w.len()..].chars().next();
                let before = code[..i].chars().next_back();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if found {
                named.push(format!("{} names {w}", f.display()));
            }
        }
    }
    assert!(named.is_empty(), "the read side holds a writer: {named:?}");
}

/// The CLI's argument types stay with the CLI: only `src/cli.rs`, the commands that turn flags
/// into the library's own config types, the dispatcher and the man page name `cli::` — the read
/// side, verify and every other room take their config types, callable without clap.
#[test]
fn only_the_commands_take_the_cli_s_types() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let commands = root().join("src/commands");
    let allowed = ["src/cli.rs", "src/lib.rs", "src/main.rs", "src/man.rs"];
    let named: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(&commands) && !allowed.iter().any(|a| f.ends_with(a)))
        .filter(|f| code_of(&std::fs::read_to_string(f).unwrap()).contains("cli::"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(named.is_empty(), "the CLI's types named by {named:?}");
}

/// Settings hold what a user sets: no type read from `tally.toml` (one that derives
/// `Deserialize`) has a field serde skips — what a process adds at run time (an app's name, a
/// run's size, the input decoder) is a context passed beside it, not hidden in the settings.
#[test]
fn settings_types_hold_no_runtime_fields() {
    let mut files = Vec::new();
    for dir in [
        "src",
        "core/src",
        "producer/src",
        "consumer/src",
        "counter/src",
        "analytics/src",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.contains("#[serde(skip)]") {
                continue;
            }
            // The type the field is in: the nearest `struct` above it, and its derives.
            let Some(at) = (0..i).rev().find(|&j| lines[j].contains("struct ")) else {
                continue;
            };
            let derives = (at.saturating_sub(4)..at)
                .map(|j| lines[j])
                .filter(|l| l.contains("derive("))
                .collect::<String>();
            if derives.contains("Deserialize") {
                found.push(format!("{}:{}", f.display(), i + 1));
            }
        }
    }
    assert!(found.is_empty(), "settings fields serde skips: {found:?}");
}

/// The commands are thin adapters: nothing imports them but the dispatcher (`src/lib.rs`) — not
/// the read side, verify, the stream reading, the benches or the tests — and the read side
/// (`serve/`) names no command.
#[test]
fn nothing_imports_the_commands() {
    let mut files = Vec::new();
    for dir in ["src", "serve", "benches", "tests"] {
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

/// The module file a path names, starting in module directory `dir` (whose own file is
/// `module_file`): each segment descends while `seg.rs` or `seg/mod.rs` exists; the file reached
/// (`module_file` when none does: a name the module itself defines).
fn resolve(dir: &Path, module_file: &Path, segments: &[&str]) -> PathBuf {
    let (mut dir, mut file) = (dir.to_owned(), module_file.to_owned());
    for s in segments {
        let (flat, nested) = (dir.join(format!("{s}.rs")), dir.join(s).join("mod.rs"));
        if flat.exists() {
            file = flat;
        } else if nested.exists() {
            file = nested;
        } else {
            break;
        }
        dir = dir.join(s);
    }
    file
}

/// A module file's directory of children, and its parent module's file and directory.
fn module_of(file: &Path, src: &Path) -> (PathBuf, Option<(PathBuf, PathBuf)>) {
    let d = file.parent().unwrap().to_owned();
    let name = file.file_name().unwrap().to_str().unwrap();
    let owner = |dir: &Path| -> PathBuf {
        for f in ["mod.rs", "lib.rs", "main.rs"] {
            if dir.join(f).exists() {
                return dir.join(f);
            }
        }
        dir.with_extension("rs")
    };
    if matches!(name, "lib.rs" | "main.rs") && d == src {
        return (d, None);
    }
    if name == "mod.rs" {
        let p = d.parent().unwrap().to_owned();
        return (d, Some((owner(&p), p)));
    }
    (d.join(file.file_stem().unwrap()), Some((owner(&d), d)))
}

/// A file's code without its comments and its unit tests (an inline `mod tests`, whose `super`
/// is the file itself).
fn code_of(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files of one crate (`src` its source root) each file names through `crate::`, `super::`
/// or `self::` paths (a `{…}` group's entries each).
fn imports(src: &Path) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let root_file = resolve(src, &src.join("lib.rs"), &[]);
    files
        .iter()
        .map(|f| {
            let text = code_of(&std::fs::read_to_string(f).unwrap());
            let (own_dir, parent) = module_of(f, src);
            let mut out = Vec::new();
            for (start, rest) in ["crate::", "super::", "self::"]
                .iter()
                .flat_map(|k| text.match_indices(k).map(move |(i, _)| (*k, i + k.len())))
            {
                let before = text[..rest - start.len()].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let (dir, file) = match start {
                    "crate::" => (src.to_owned(), root_file.clone()),
                    "super::" => match &parent {
                        Some((pf, pd)) => (pd.clone(), pf.clone()),
                        None => continue,
                    },
                    _ => (own_dir.clone(), f.clone()),
                };
                let tail = &text[rest..];
                let group = tail.starts_with('{');
                let body: String = if group {
                    tail[1..tail.find('}').unwrap_or(tail.len())].to_owned()
                } else {
                    tail.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect()
                };
                let paths: Vec<&str> = if group {
                    body.split(',').map(str::trim).collect()
                } else {
                    vec![body.as_str()]
                };
                for p in paths {
                    let segs: Vec<&str> = p
                        .split("::")
                        .map(|s| s.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_')))
                        .filter(|s| !s.is_empty() && *s != "self")
                        .collect();
                    let target = resolve(&dir, &file, &segs);
                    if target != *f && !out.contains(&target) {
                        out.push(target);
                    }
                }
            }
            // A child module named by a relative path (`mod source;` … `source::read`).
            for line in text.lines() {
                let l = line.trim();
                let Some(name) = l
                    .strip_prefix("mod ")
                    .or_else(|| l.strip_prefix("pub mod "))
                    .or_else(|| l.strip_prefix("pub(crate) mod "))
                    .and_then(|r| r.strip_suffix(';'))
                else {
                    continue;
                };
                let named = text.match_indices(&format!("{name}::")).any(|(i, _)| {
                    !text[..i]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                });
                let target = resolve(&own_dir, f, &[name]);
                if named && target != *f && !out.contains(&target) {
                    out.push(target);
                }
            }
            (f.clone(), out)
        })
        .collect()
}

/// Whether `module` is a module above `file`'s (its `mod.rs`, `lib.rs` or `x.rs` beside `x/`):
/// a child naming what its parent module defines is of that module, not an import between two
/// rooms.
fn is_above(module: &Path, file: &Path) -> bool {
    let dir = match module.file_name().unwrap().to_str().unwrap() {
        "mod.rs" | "lib.rs" | "main.rs" => module.parent().unwrap().to_owned(),
        _ => module.with_extension(""),
    };
    file != module && file.starts_with(dir)
}

/// Issue 43: no two files of a crate import each other, directly or around a loop. A child
/// module naming its parent's definitions (`super::Worker`) is of its parent, as `farm-studio
/// look` reads it; a parent naming its child, or siblings naming each other, are imports.
#[test]
fn no_files_import_each_other_around_a_loop() {
    let crates = CRATES;
    let mut loops = Vec::new();
    for src in crates
        .iter()
        .map(|c| root().join(c).join("src"))
        .chain([root().join("src")])
    {
        let graph: Vec<(PathBuf, Vec<PathBuf>)> = imports(&src)
            .into_iter()
            .map(|(f, targets)| {
                let t = targets.into_iter().filter(|t| !is_above(t, &f)).collect();
                (f, t)
            })
            .collect();
        let index: std::collections::HashMap<&PathBuf, usize> =
            graph.iter().enumerate().map(|(i, (f, _))| (f, i)).collect();
        // A loop through `a` is a path from one of its imports back to it.
        for (a, targets) in &graph {
            let mut seen = vec![false; graph.len()];
            let mut stack: Vec<(usize, Vec<usize>)> = targets
                .iter()
                .filter_map(|t| index.get(t).map(|&i| (i, vec![i])))
                .collect();
            while let Some((i, path)) = stack.pop() {
                if &graph[i].0 == a {
                    let names: Vec<String> = std::iter::once(a)
                        .chain(path.iter().map(|&j| &graph[j].0))
                        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
                        .collect();
                    loops.push(names.join(" -> "));
                    break;
                }
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                for t in &graph[i].1 {
                    if let Some(&j) = index.get(t) {
                        let mut p = path.clone();
                        p.push(j);
                        stack.push((j, p));
                    }
                }
            }
        }
    }
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

/// ARCHITECTURE's code map names every module file of every crate (a file added without its
/// line in the map fails here).
#[test]
fn the_code_map_names_every_module() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = text.find("## Code map").unwrap();
    let end = text[start + 3..]
        .find("\n## ")
        .map_or(text.len(), |e| start + 3 + e);
    let map = &text[start..end];
    let named = |stem: &str| {
        map.match_indices(stem).any(|(i, _)| {
            let word = |c: char| c.is_alphanumeric() || c == '_';
            !map[..i].chars().next_back().is_some_and(word)
                && !map[i + stem.len()..].chars().next().is_some_and(word)
        })
    };
    let mut missing = Vec::new();
    for dir in CRATES
        .iter()
        .map(|c| format!("{c}/src"))
        .chain(["src".to_owned()])
    {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            let stem = f.file_stem().unwrap().to_str().unwrap().to_owned();
            if !["mod", "lib", "main"].contains(&stem.as_str()) && !named(&stem) {
                missing.push(f.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE's code map does not name {missing:?}"
    );
}

/// The library crates, by directory.
const CRATES: &[&str] = &[
    "core",
    "consumer",
    "counter",
    "analytics",
    "producer",
    "embedded",
    "aws",
    "conformance",
    "serve",
    "router",
    "ingest",
    "recording",
    "verify",
    "baselines",
];

/// The source root of a crate by the name ARCHITECTURE gives it (`counter` or `tally_counter`;
/// `tally` is the binary's library), and its root module's file.
fn crate_root(name: &str) -> Option<(PathBuf, PathBuf)> {
    let dir = match name.strip_prefix("tally_").unwrap_or(name) {
        "tally" => root().join("src"),
        c if CRATES.contains(&c) => root().join(c).join("src"),
        _ => return None,
    };
    let lib = dir.join("lib.rs");
    Some((dir, lib))
}

/// Whether `text` has `w` as a whole word.
fn has_word(text: &str, w: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(w).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(word)
            && !text[i + w.len()..].chars().next().is_some_and(word)
    })
}

/// Whether a module path names something that exists under the crate source root `dir`
/// (`lib` its root file): each segment a module file while one exists (`seg.rs`,
/// `seg/mod.rs`), and each segment after the last of them a word of that file (an item, an
/// inline module, a method).
fn module_path_exists(dir: &Path, lib: &Path, segments: &[&str]) -> bool {
    let (mut dir, mut file) = (dir.to_owned(), lib.to_owned());
    let mut rest = segments;
    while let Some((s, tail)) = rest.split_first() {
        let (flat, nested) = (dir.join(format!("{s}.rs")), dir.join(s).join("mod.rs"));
        file = match (flat.exists(), nested.exists()) {
            (true, _) => flat,
            (_, true) => nested,
            _ => break,
        };
        dir = dir.join(s);
        rest = tail;
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    rest.iter().all(|s| has_word(&text, s))
}

/// Issue 73: ARCHITECTURE names only what exists. Every path it names (a backticked
/// `dir/file.rs` or `dir/`), every crate-qualified module or item (`counter::counting::changes`,
/// `tally_core::ports::EdgeWriter::change_log`; a path whose first segment is a top-level module
/// of some crate, `serve::pending::Memory`, is looked for in each such crate), every member of a
/// type (`Counter::open_change_log`: a word of a file that defines the type), and every test an
/// `**Invariant:**` paragraph names (a `fn`, or an `on_backends!` case) — so a file, module, item
/// or test renamed or deleted without its mention fails here.
#[test]
fn the_architecture_names_only_what_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut sources: Vec<String> = Vec::new();
    for dir in CRATES.iter().chain(&["src", "tests", "benches"]) {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            sources.push(std::fs::read_to_string(f).unwrap());
        }
    }
    // Fenced blocks (diagrams) are left out; what is between backticks is a name.
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let names: Vec<&str> = prose.split('`').skip(1).step_by(2).collect();
    assert!(names.len() > 100, "{} backticked names", names.len());
    let mut missing = Vec::new();
    let mut paths = 0;
    let mut modules = 0;
    let mut members = 0;
    for name in &names {
        let path_like = |c: char| c.is_alphanumeric() || "/._-".contains(c);
        if name.contains('/') && !name.starts_with('/') && name.chars().all(path_like) {
            paths += 1;
            if !root().join(name).exists() {
                missing.push(format!("path {name}"));
            }
            continue;
        }
        let code = name.split('(').next().unwrap_or_default();
        let segments: Vec<&str> = code.split("::").collect();
        let module_like = |c: char| c.is_alphanumeric() || c == '_';
        if segments.len() < 2
            || !segments
                .iter()
                .all(|s| !s.is_empty() && s.chars().all(module_like))
        {
            continue;
        }
        let first = segments[0];
        if first.starts_with(|c: char| c.is_ascii_uppercase()) {
            // A type's member: a file that defines the type has it as a word.
            members += 1;
            let defines = |t: &str| {
                ["struct", "enum", "trait", "type"]
                    .iter()
                    .any(|k| has_word(t, &format!("{k} {first}")))
            };
            if !sources
                .iter()
                .any(|t| defines(t) && segments[1..].iter().all(|s| has_word(t, s)))
            {
                missing.push(format!("member {name}"));
            }
            continue;
        }
        let candidates: Vec<(PathBuf, PathBuf, &[&str])> = match crate_root(first) {
            Some((dir, lib)) => vec![(dir, lib, &segments[1..])],
            None => CRATES
                .iter()
                .chain(&["tally"])
                .filter_map(|c| crate_root(c))
                .filter(|(dir, _)| {
                    dir.join(format!("{first}.rs")).exists()
                        || dir.join(first).join("mod.rs").exists()
                })
                .map(|(dir, lib)| (dir, lib, &segments[..]))
                .collect(),
        };
        if candidates.is_empty() {
            continue;
        }
        modules += 1;
        if !candidates
            .iter()
            .any(|(dir, lib, segs)| module_path_exists(dir, lib, segs))
        {
            missing.push(format!("module or item {name}"));
        }
    }
    assert!(
        paths > 50 && modules > 20 && members > 10,
        "{paths} paths, {modules} modules, {members} members"
    );
    // The tests the invariants name: every function and `on_backends!` case of the tree.
    let mut tests = 0;
    for paragraph in prose.split("\n\n").filter(|p| p.starts_with("**Invariant")) {
        for name in paragraph.split('`').skip(1).step_by(2) {
            let test_like = name.matches('_').count() >= 3
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !test_like {
                continue;
            }
            tests += 1;
            let defined = [
                format!("fn {name}("),
                format!("fn {name}<"),
                format!(" {name} {{"),
            ];
            if !defined
                .iter()
                .any(|d| sources.iter().any(|t| t.contains(d.as_str())))
            {
                missing.push(format!("test {name}"));
            }
        }
    }
    assert!(tests > 10, "{tests} tests named by the invariants");
    assert!(
        missing.is_empty(),
        "ARCHITECTURE names what does not exist: {missing:#?}"
    );
}

/// README's list of global flags is the CLI's: every flag clap marks global is named there, and
/// the list names no other.
#[test]
fn the_readme_names_every_global_flag() {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = text
        .find("Global flags:")
        .expect("README lists the global flags");
    let end = text[start..].find("\n\n").map_or(text.len(), |e| start + e);
    let listed: std::collections::BTreeSet<String> = text[start..end]
        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect();
    let global: std::collections::BTreeSet<String> = tally::cli::Cli::command()
        .get_arguments()
        .filter(|a| a.is_global_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    assert!(global.len() >= 9, "{global:?}");
    assert_eq!(listed, global, "README's global flags against the CLI's");
}

/// Every product source file (the library crates' and the binary's; not the conformance suite's),
/// with its source root (`core/src`, …, `src`).
fn product_files() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let dirs = CRATES.iter().filter(|c| **c != "conformance");
    for dir in dirs.map(|c| format!("{c}/src")).chain(["src".to_owned()]) {
        let mut files = Vec::new();
        rust_files(&root().join(&dir), &mut files);
        out.extend(files.into_iter().map(|f| (dir.clone(), f)));
    }
    out
}

/// Issue 73: rooms stay small. No product file (test modules aside) is over 800 lines, and the
/// binary's crate stays the command line, settings, wiring and commands: what grows there
/// belongs in a crate named for it.
#[test]
fn product_files_and_the_binary_crate_stay_small() {
    let product_lines = |f: &Path| {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        code.lines().count()
    };
    let mut big = Vec::new();
    let mut binary = 0;
    for (dir, f) in product_files() {
        let n = product_lines(&f);
        if n > 800 {
            big.push(format!("{} ({n} lines)", f.display()));
        }
        if dir == "src" {
            binary += n;
        }
    }
    assert!(big.is_empty(), "product files over 800 lines: {big:?}");
    assert!(
        binary <= 4_500,
        "src/ holds {binary} product lines: move what is not the command line, settings, wiring \
         or a command into a crate named for it"
    );
}

/// Issue 73: the documents are maps, not diaries — ARCHITECTURE and BENCHMARKS within 40 KB
/// (the history is git's), README within 20 KB (the first hour first).
#[test]
fn the_documents_stay_maps() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (doc, most) in [
        ("ARCHITECTURE.md", 40_000),
        ("BENCHMARKS.md", 40_000),
        ("README.md", 20_000),
    ] {
        let bytes = std::fs::metadata(root.join(doc)).unwrap().len();
        assert!(
            bytes <= most,
            "{doc} is {bytes} bytes, over {most}: say it shorter, or move detail beside the code"
        );
    }
}

/// Issue 73: the count mode is a type chosen once, not a flag checked in many files. What a mode
/// does lives in the modes' own modules (the mode itself, the windows' folds, the counter's
/// counting, verify's recounts); elsewhere a mode is asked what it can do (`keeps_edges`) or
/// resolved into the store's `Counted`. Outside those modules only `Counted` and the rebuild name
/// a mode's variant.
#[test]
fn a_mode_is_named_only_where_it_is_chosen() {
    let modes = [
        "core/src/edge/mode.rs",
        "core/src/window/",
        "counter/src/counting/",
        "verify/src/recount/",
    ];
    let variants = [
        "CountMode::Likers",
        "CountMode::Events",
        "Counted::Likers",
        "Counted::Events",
    ];
    let mut naming = Vec::new();
    for (_, f) in product_files() {
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        if modes.iter().any(|m| rel.starts_with(m)) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        if variants.iter().any(|v| code.contains(v)) {
            naming.push(rel);
        }
    }
    naming.sort();
    // `Counted` itself, and the rebuild, which claims likers (its edges are all it copies).
    let chosen = ["core/src/ports/reads.rs", "counter/src/rebuild.rs"];
    assert_eq!(
        naming, chosen,
        "files outside the modes' own modules that name a mode: ask the mode (`keeps_edges`) or \
         the store's `Counted` instead"
    );
}
