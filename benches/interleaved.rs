//! The core benchmark's passes (`benches/core.rs`: 5,000 records over 1,000 posts) timed in
//! turns rather than one after the other: each round runs every pass once, in a rotating order,
//! so a load that comes and goes on a shared machine falls on all of them alike. Prints each
//! pass's median rate and its median ratio to bare decoding within a round — the figure the
//! issue's goals are stated in.
//!
//! `cargo bench --bench interleaved` (`-- ROUNDS`, default 300).
#![allow(clippy::unwrap_used)]

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::rounds::{median, rounds};
use common::{analytics, analytics_fold, bare_decode, fold_window, naive_fold, records};
use tally_core::dedup::Dedup;

type Pass<'a> = Box<dyn Fn() -> u64 + 'a>;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds = rounds(300);
    let recs = records(5_000, 1_000);
    let n = recs.len() as f64;
    let passes: Vec<(&str, Pass<'_>)> = vec![
        ("bare_serde_decode", Box::new(|| bare_decode(&recs) as u64)),
        ("naive_fold", Box::new(|| naive_fold(&recs) as u64)),
        (
            "fold_5000_records_1000_posts",
            Box::new(|| {
                let mut dedup = Dedup::new(600_000);
                fold_window(&recs, &mut dedup).posts.len() as u64
            }),
        ),
        (
            "analytics_fold_5000_records_1000_posts",
            Box::new(|| analytics_fold(&recs, &mut analytics())),
        ),
    ];
    // Warm-up: caches, allocator, CPU frequency.
    for _ in 0..if bench { 20 } else { 0 } {
        for (_, p) in &passes {
            black_box(p());
        }
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); passes.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); passes.len()];
    for round in 0..rounds {
        let mut this = vec![0.0; passes.len()];
        for k in 0..passes.len() {
            let i = (round + k) % passes.len();
            let t = Instant::now();
            black_box(passes[i].1());
            this[i] = n / t.elapsed().as_secs_f64() / 1e6;
        }
        for i in 0..passes.len() {
            rates[i].push(this[i]);
            ratios[i].push(this[i] / this[0]);
        }
    }
    println!(
        "{rounds} rounds of each pass over {} records, in turns",
        recs.len()
    );
    println!(
        "{:<40} {:>12} {:>16}",
        "pass", "M records/s", "of bare decoding"
    );
    for (i, (name, _)) in passes.iter().enumerate() {
        println!(
            "{:<40} {:>12.2} {:>15.0}%",
            name,
            median(&mut rates[i]),
            100.0 * median(&mut ratios[i])
        );
    }
}
