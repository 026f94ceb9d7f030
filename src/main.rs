//! The `tally` binary. Everything it does is in the library (`src/lib.rs`).

/// jemalloc, not the system's malloc (BENCHMARKS, "The binary on jemalloc"); the library and its
/// tests use whatever allocator their binary has.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    // Output into a closed pipe (`tally dead-letters | head -1`) ends the process quietly, as
    // it does for other Unix tools, instead of a panic.
    sigpipe::reset();
    let cli = tally::cli::Cli::parse_args();
    tally::init_logging(&cli);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let done = rt.block_on(tally::run(cli));
    // A store call still blocked (an embedded store another process holds locked answers only
    // when SQLite's wait ends) is not waited for: the command is done, and a stop is not held up.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    if let Err(e) = done {
        eprintln!("error: {e:#}");
        std::process::exit(tally::exit_code(&e));
    }
}
