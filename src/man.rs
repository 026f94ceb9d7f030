//! `tally man`: one manual page, tally(1), with every command in it (no per-command pages are
//! shipped, so none is referred to), and the sections a user looks for: EXIT STATUS, ENVIRONMENT,
//! FILES, EXAMPLES.

use std::io::Write;

/// Roff-escapes text: backslashes, dashes, and a leading dot or quote.
fn esc(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// Lines kept as written (examples).
fn verbatim(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b".nf\n");
    for l in text.lines() {
        out.extend_from_slice(esc(l).as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b".fi\n");
}

fn section(out: &mut Vec<u8>, title: &str) {
    out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
}

fn item(out: &mut Vec<u8>, tag: &str, text: &str) {
    out.extend_from_slice(format!(".TP\n{}\n{}\n", tag, esc(text)).as_bytes());
}

/// The whole page, in roff.
pub fn page() -> std::io::Result<Vec<u8>> {
    let cmd = crate::cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;

    section(&mut out, "COMMANDS");
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        item(
            &mut out,
            &format!("\\fBtally {}\\fR", esc(sub.get_name())),
            &about,
        );
        if let Some(ex) = sub.get_after_help() {
            verbatim(&mut out, &ex.to_string());
        }
    }
    out.extend_from_slice(b".PP\n`tally COMMAND \\-\\-help` lists a command's own options.\n");

    section(&mut out, "EXIT STATUS");
    for (code, what) in [
        ("0", "Done."),
        ("1", "An error, said in one line naming what and where; `tally verify`: a drift found."),
        (
            "2",
            "A usage error (a bad flag or value), or `--until-idle --timeout` running out (the shards not caught up are named).",
        ),
        (
            "130",
            "`produce` or `replay` stopped by SIGINT or SIGTERM between batches (it says how many records it put).",
        ),
    ] {
        item(&mut out, code, what);
    }

    section(&mut out, "ENVIRONMENT");
    for (var, what) in [
        (
            "TALLY_*",
            "Any setting, e.g. TALLY_COUNTER__WINDOW_MS=500 for counter.window_ms (double underscore between section and key); above tally.toml, below flags. `tally config` prints the result.",
        ),
        ("TALLY_LOG, RUST_LOG", "A log filter when --log-level is not given (e.g. debug, tally_consumer=debug)."),
        ("NO_COLOR", "Plain logs, no colour."),
        (
            "AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, ...",
            "With --backend aws: the SDK's usual credential and region chain.",
        ),
        (
            "ECS_CONTAINER_METADATA_URI_V4",
            "Set by ECS: the worker id defaults to the task id, and a worker bound to every interface advertises the task's IP.",
        ),
    ] {
        item(&mut out, &esc(var), what);
    }

    section(&mut out, "FILES");
    for (f, what) in [
        ("./tally.toml", "The configuration file read when present (or --config FILE)."),
        (
            "./data/tally.db",
            "The embedded backend's store (SQLite; --data-dir DIR): stream, leases, counts, dead letters. Several processes on one machine share it.",
        ),
        (
            "./data/edges.db, ./data/edges-1.db",
            "Beside it, the likers' edges (SQLite), parted by post: who likes which post. Part of the same store: copy, move or delete the files together.",
        ),
    ] {
        item(&mut out, &esc(f), what);
    }

    section(&mut out, "EXAMPLES");
    if let Some(ex) = cmd.get_after_help() {
        verbatim(&mut out, &ex.to_string());
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

pub fn print() -> anyhow::Result<()> {
    std::io::stdout().write_all(&page()?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_refers_to_no_other_page_and_has_the_usual_sections() {
        let page = String::from_utf8(page().unwrap()).unwrap();
        assert!(
            !page.contains("tally\\-count(1)"),
            "no per-command pages exist"
        );
        assert!(!page.contains(".SH EXTRA"));
        for s in [
            "COMMANDS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "EXAMPLES",
        ] {
            assert!(page.contains(&format!(".SH \"{s}\"")), "{s}");
        }
        assert!(page.contains("\\fBtally verify\\fR"));
    }

    #[test]
    fn every_command_has_examples() {
        let missing: Vec<String> = crate::cli::command()
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .filter(|s| {
                !s.get_after_help()
                    .is_some_and(|h| h.to_string().contains("Examples:"))
            })
            .map(|s| s.get_name().to_owned())
            .collect();
        assert!(missing.is_empty(), "without examples: {missing:?}");
    }
}
