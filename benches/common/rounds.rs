//! What the benches that time passes in turns share: how many rounds, and their median.

/// The rounds to run: the first number among the arguments (`-- ROUNDS`), else `default` under
/// `cargo bench`; one round when a test build runs the bench binary without `--bench`
/// (`cargo test --all-targets`), which only checks that the passes run.
pub fn rounds(default: usize) -> usize {
    let bench = std::env::args().any(|a| a == "--bench");
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if bench { default } else { 1 })
}

/// The median of the values (sorting them).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
