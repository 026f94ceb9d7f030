//! What an app team trips on in its first week (issue 74), each a test that failed on the build
//! before it: a store missing a part of its edges is refused by every command, naming the file,
//! and never made anew; a rebuild from such a source refuses.

use crate::common::Target;

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
