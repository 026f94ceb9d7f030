//! The `tally` binary. Everything it does is in the library (`src/lib.rs`).

/// jemalloc, not the system's malloc (BENCHMARKS, "The binary on jemalloc"); the library and its
/// tests use whatever allocator their binary has.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() {
    // Output into a closed pipe (`tally dead-letters | head -1`) ends the process quietly, as
    // it does for other Unix tools, instead of a panic.
    sigpipe::reset();
    let cli = tally::cli::Cli::parse_args();
    tally::init_logging(&cli);
    if let Err(e) = tally::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(tally::exit_code(&e));
    }
}
