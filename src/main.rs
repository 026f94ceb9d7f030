//! The `tally` binary. Everything it does is in the library (`src/lib.rs`).

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
