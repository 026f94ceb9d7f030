//! A held lease's extension, shared by its shard task (the renewal beside the processing, and the
//! progress report at the tip) and its processor (the counter's window checkpoint): each write of
//! the lease row that carries a [`Renewal`] extends the lease, and the renewal loop renews only
//! when the last extension, whoever wrote it, is a renewal interval old. At a low rate a window's
//! checkpoint stands in for a renewal; at a high rate checkpoints come faster than renewals would,
//! and the renewal loop writes none.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tally_core::clock::now_ms;
use tally_core::ports::{ReadProgress, Renewal};

use super::{WorkerConfig, WorkerContext};

/// A held lease's extension: what a write of its row renews it with, and until when it is held.
#[derive(Clone)]
pub struct LeaseKeeper {
    inner: Arc<Inner>,
}

struct Inner {
    /// How long a write extends the lease (`lease.duration_ms`).
    duration_ms: i64,
    /// How often it is extended (`lease.renew_ms`).
    renew_ms: i64,
    /// Where the holder serves its open windows.
    advertise: Option<String>,
    /// How far behind the tip the last read was.
    progress: Mutex<Option<ReadProgress>>,
    /// Who asked for the lease, as a write of its row (or the fleet listing) heard it first.
    asked_by: Arc<Mutex<Option<String>>>,
    /// The expiry the last write that extended the lease wrote (ms since the epoch).
    until_ms: AtomicI64,
}

impl LeaseKeeper {
    /// The keeper of a lease just taken, held until `expires_ms`.
    pub(super) fn new(
        cfg: &WorkerConfig,
        ctx: &WorkerContext,
        expires_ms: i64,
        asked_by: Arc<Mutex<Option<String>>>,
    ) -> LeaseKeeper {
        LeaseKeeper {
            inner: Arc::new(Inner {
                duration_ms: cfg.lease_duration.as_millis() as i64,
                renew_ms: cfg.renew_interval.as_millis() as i64,
                advertise: ctx.advertise.clone(),
                progress: Mutex::new(None),
                asked_by,
                until_ms: AtomicI64::new(expires_ms),
            }),
        }
    }

    /// What a write of the lease row made now extends it with: a lease duration from now, the
    /// reader's progress and the holder's address.
    pub fn renewal(&self) -> Renewal {
        Renewal {
            expires_ms: now_ms() + self.inner.duration_ms,
            progress: self.progress(),
            addr: self.inner.advertise.clone(),
        }
    }

    /// A write carrying `renewal` landed; `asked` is who has asked for the lease, as it read.
    pub fn extended(&self, renewal: &Renewal, asked: Option<String>) {
        self.inner
            .until_ms
            .fetch_max(renewal.expires_ms, Ordering::Relaxed);
        note_ask(&self.inner.asked_by, asked);
    }

    /// How long until the lease is due a renewal: when what the last extension wrote has less
    /// than a lease duration less a renewal interval left (zero: now).
    pub(super) fn due_in(&self) -> Duration {
        let due = self.inner.until_ms.load(Ordering::Relaxed) - self.inner.duration_ms
            + self.inner.renew_ms;
        Duration::from_millis((due - now_ms()).max(0) as u64)
    }

    /// The worker that asked for the lease, as a write of its row or the fleet listing heard it.
    pub(super) fn asked_by(&self) -> Option<String> {
        self.inner.asked_by.lock().ok().and_then(|a| a.clone())
    }

    /// How far behind the tip the last read was, as kept for the next renewal.
    pub(super) fn progress(&self) -> Option<ReadProgress> {
        self.inner.progress.lock().ok().and_then(|p| *p)
    }

    /// Keeps how far behind the tip a read was, for the next write that extends the lease.
    pub(super) fn set_progress(&self, p: ReadProgress) {
        if let Ok(mut g) = self.inner.progress.lock() {
            *g = Some(p);
        }
    }
}

/// Keeps a request for the lease that a write of its row read, for the shard task's loop.
pub(super) fn note_ask(asked_by: &Mutex<Option<String>>, asked: Option<String>) {
    if let (Some(to), Ok(mut a)) = (asked, asked_by.lock()) {
        a.get_or_insert(to);
    }
}
