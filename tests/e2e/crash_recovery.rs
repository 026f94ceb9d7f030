//! The counter killed in the middle — by SIGKILL at random moments, and by a failpoint between
//! two batches of a window's writes — and restarted: every count still exact, dead letters
//! counted once.
#![allow(clippy::unwrap_used)]

use crate::common::{file_in, write_contract_file, Target};

/// Small windows written in many store calls, so that kills land inside windows.
const CHUNKY: &[(&str, &str)] = &[
    ("TALLY_COUNTER__WINDOW_RECORDS", "150"),
    ("TALLY_COUNTER__POSTS_PER_BATCH", "3"),
    ("TALLY_LEASE__DURATION_MS", "1000"),
    ("TALLY_LEASE__RENEW_MS", "200"),
    ("TALLY_LEASE__POLL_MS", "100"),
];

fn check_exact(t: &Target, exp: &crate::common::Expected) {
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        exp.malformed as u64
    );
}

on_backends! {
    sigkill_at_random_moments_keeps_counts_exact {
        embedded => sigkill_at_random_moments_keeps_counts_exact(Target::embedded(), 20_000, 1),
        aws => sigkill_at_random_moments_keeps_counts_exact(Target::aws("sigkill", 2), 2_000, 4),
        aws_efo => sigkill_at_random_moments_keeps_counts_exact(Target::aws_efo("sigkill-efo", 2), 2_000, 4),
    }
}

fn sigkill_at_random_moments_keeps_counts_exact(t: Target, events: usize, slower: u64) {
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, events, 60, 11);
    t.run(&["replay", file.to_str().unwrap()]);

    let killed = crate::common::count_killed_at(&t, &[120, 310, 90, 450, 200, 600], slower, CHUNKY);
    assert!(
        killed >= 3,
        "the kills must land while the counter runs (killed {killed})"
    );
    t.run_env(&["count", "--until-idle", "--worker-id", "final"], CHUNKY);
    check_exact(&t, &exp);
    t.assert_read_as_configured();
}

on_backends! {
    crash_between_two_batches_resumes_the_window {
        embedded => crash_between_two_batches_resumes_the_window(Target::embedded()),
        aws => crash_between_two_batches_resumes_the_window(Target::aws("batches", 2)),
        aws_efo => crash_between_two_batches_resumes_the_window(Target::aws_efo("batches-efo", 2)),
    }
}

fn crash_between_two_batches_resumes_the_window(t: Target) {
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 2_000, 80, 5);
    t.run(&["replay", file.to_str().unwrap()]);
    // Abort right after the 3rd batch of post writes: the first window (150 records, dozens of
    // posts in batches of 3) is then partly written.
    let mut env = CHUNKY.to_vec();
    env.push(("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "3"));
    let out = t.fail(&["count", "--until-idle", "--worker-id", "w"], &env);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failpoint"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing is counted twice or lost: the partial window is visible as partial…
    let partial = t.json(&["total", "--json"])["total"].as_i64().unwrap();
    assert_eq!(
        partial, 0,
        "the global total moves only after a window's posts"
    );
    // …and a restart applies the window again: what was written is refused, the rest written.
    t.run_env(&["count", "--until-idle", "--worker-id", "w"], CHUNKY);
    check_exact(&t, &exp);
    t.assert_read_as_configured();
}

on_backends! {
    a_half_applied_window_is_completed_under_changed_settings {
        embedded => a_half_applied_window_is_completed_under_changed_settings(Target::embedded()),
        aws => a_half_applied_window_is_completed_under_changed_settings(Target::aws("shape", 2)),
    }
}

/// A rolling configuration change meets a half-applied window: the restarted counter has another
/// batch size, another dedup horizon and another window size, yet completes the window exactly
/// as it was decided (its horizon is stored with the pending end), then goes on with the new
/// settings.
fn a_half_applied_window_is_completed_under_changed_settings(t: Target) {
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 2_000, 80, 6);
    t.run(&["replay", file.to_str().unwrap()]);
    let mut env = CHUNKY.to_vec();
    env.push(("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "2"));
    let out = t.fail(&["count", "--until-idle", "--worker-id", "w"], &env);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failpoint"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = [
        ("TALLY_COUNTER__WINDOW_RECORDS", "400"),
        ("TALLY_COUNTER__POSTS_PER_BATCH", "5"),
        ("TALLY_COUNTER__DEDUP_HORIZON_SECS", "300"),
        ("TALLY_LEASE__DURATION_MS", "1000"),
        ("TALLY_LEASE__RENEW_MS", "200"),
        ("TALLY_LEASE__POLL_MS", "100"),
    ];
    t.run_env(&["count", "--until-idle", "--worker-id", "w"], &changed);
    check_exact(&t, &exp);
}
