//! SIGINT and SIGTERM: the first asks for an orderly stop (windows finished and checkpointed,
//! leases released, the batch in flight put), a second exits at once. Nothing is lost either way:
//! a checkpoint never passes an unapplied window, and a record put twice is a producer retry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Interrupted by SIGINT or SIGTERM: what was put is said, and the exit status is
/// [`Interrupted::EXIT`].
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal: {0}")]
pub struct Interrupted(pub String);

impl Interrupted {
    /// The exit status of a process a signal ended (128 + SIGINT).
    pub const EXIT: i32 = 130;
}

/// Resolves at the first signal; a second one exits the process at once.
pub async fn shutdown() {
    first().await;
    tracing::info!("signal received: finishing open windows, checkpointing and releasing leases (again to exit at once)");
    exit_on_second();
}

/// A flag raised by the first signal (a second one exits at once), for a loop that stops between
/// batches.
pub fn stop_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let raised = flag.clone();
    tokio::spawn(async move {
        first().await;
        raised.store(true, Ordering::Relaxed);
        exit_on_second();
    });
    flag
}

fn exit_on_second() {
    tokio::spawn(async {
        first().await;
        eprintln!("second signal: exiting now");
        std::process::exit(Interrupted::EXIT);
    });
}

/// The next SIGINT or SIGTERM.
async fn first() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
