//! What a shard's window writes are made with — its store, settings, board and lease — and the
//! store calls every window's writes share: a batch sent until each item is done, the posts'
//! summary items, the failpoint, a failure named for its window. Both the applying of a window
//! (`apply`) and each way of counting (`counting`) write with it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tally_consumer::retry::Retry;
use tally_consumer::worker::LeaseKeeper;
use tally_consumer::ConsumerError;
use tally_core::ports::{Applied, CounterStore, Fence, PortError, PortResult, WindowRef};
use tally_core::window::ClosedWindow;

use crate::board::ShardWindows;
use crate::{CounterConfig, CounterContext, CounterMetrics};

/// A held shard's writes: what they are made with.
pub(crate) struct ShardWrites {
    pub(crate) store: Arc<dyn CounterStore>,
    pub(crate) cfg: CounterConfig,
    pub(crate) ctx: Arc<CounterContext>,
    pub(crate) metrics: Arc<CounterMetrics>,
    pub(crate) windows: Arc<Mutex<ShardWindows>>,
    pub(crate) fence: Fence,
    pub(crate) keeper: Option<LeaseKeeper>,
}

impl ShardWrites {
    /// Counts a batch of writes; the test failpoint `crash_after_batches` aborts the process
    /// once that many are done (`what`: the writes they were, for its message).
    pub(crate) fn failpoint(&self, what: &str) {
        let batches = self.metrics.batches.fetch_add(1, Ordering::Relaxed) + 1;
        if self.ctx.crash_after_batches.is_some_and(|n| batches >= n) {
            eprintln!("failpoint: aborting after {batches} batches of {what}");
            std::process::abort();
        }
    }

    /// Writes one batch of posts' items, sending again only what failed for a passing reason.
    pub(super) async fn apply_batch(
        &self,
        at: WindowRef<'_>,
        batch: &[(String, tally_core::buckets::PostDelta)],
    ) -> PortResult<Applied> {
        let mut sending = Resend::new(&self.ctx.backoff, "write a window's summary items", batch);
        let mut spent = Applied::default();
        loop {
            let sent = self
                .store
                .apply_posts(at, sending.todo())
                .await
                .map(|done| {
                    spent.merge(&done.applied);
                    (done.retry, done.error)
                });
            if sending.settle(sent).await? {
                return Ok(spent);
            }
        }
    }
}

/// A batch sent to the store until each of its items is done: what a call leaves undone for a
/// passing reason is sent again, and only that (as the producer resends only failed PutRecords
/// entries) — a batch resent whole would succeed only if every one of its items did in the same
/// pass.
pub(crate) struct Resend<'a, T: Clone> {
    todo: std::borrow::Cow<'a, [T]>,
    retry: Retry<'a>,
    what: &'a str,
}

impl<'a, T: Clone> Resend<'a, T> {
    pub(crate) fn new(
        backoff: &'a tally_core::retry::Backoff,
        what: &'a str,
        items: &'a [T],
    ) -> Self {
        Resend {
            todo: items.into(),
            retry: Retry::new(backoff, what),
            what,
        }
    }

    /// As [`Resend::new`], giving up after the backoff's retries (a command an operator waits
    /// on, where the counter's windows retry for as long as the shard is theirs).
    pub(crate) fn bounded(
        backoff: &'a tally_core::retry::Backoff,
        what: &'a str,
        items: &'a [T],
    ) -> Self {
        Resend {
            retry: Retry::bounded(backoff, what),
            ..Resend::new(backoff, what, items)
        }
    }

    /// What is left to send.
    pub(crate) fn todo(&self) -> &[T] {
        &self.todo
    }

    /// Takes a call's answer — the indexes (into [`Resend::todo`]) it left undone and their
    /// last error, or its failure — and says whether every item is done; if not, keeps only the
    /// undone ones and pauses before they are sent again (a failure no retry mends ends it).
    pub(crate) async fn settle(
        &mut self,
        sent: PortResult<(Vec<usize>, Option<PortError>)>,
    ) -> PortResult<bool> {
        match sent {
            Ok((undone, _)) if undone.is_empty() => Ok(true),
            Ok((undone, error)) => {
                let left = undone.iter().map(|&i| self.todo[i].clone()).collect();
                self.todo = std::borrow::Cow::Owned(left);
                let e = error.unwrap_or_else(|| {
                    PortError::Other(format!("{}: some left undone", self.what))
                });
                self.retry.pause(e).await?;
                Ok(false)
            }
            Err(e) => {
                self.retry.pause(e).await?;
                Ok(false)
            }
        }
    }
}

/// A window's write that failed for good, naming its records.
pub(crate) fn window_err(w: &ClosedWindow, shard_id: &str, e: PortError) -> ConsumerError {
    if e.is_retryable() {
        return e.into();
    }
    ConsumerError::Window {
        shard_id: shard_id.to_owned(),
        after: w
            .start_after
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |s| s.to_string()),
        end: w.end.as_ref().map_or_else(String::new, |s| s.to_string()),
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tally_core::retry::Backoff;

    use super::*;

    fn backoff(max_retries: u32) -> Backoff {
        Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
            max_retries,
        }
    }

    fn throttled() -> Option<PortError> {
        Some(PortError::Throttled("slow down".into()))
    }

    #[tokio::test]
    async fn only_what_a_call_left_undone_is_sent_again() {
        let b = backoff(3);
        let items = ["a", "b", "c", "d"];
        let mut sending = Resend::new(&b, "writing", &items);
        assert!(!sending.settle(Ok((vec![1, 3], throttled()))).await.unwrap());
        assert_eq!(sending.todo(), ["b", "d"]);
        assert!(!sending.settle(Ok((vec![0], throttled()))).await.unwrap());
        assert_eq!(sending.todo(), ["b"]);
        assert!(sending.settle(Ok((vec![], None))).await.unwrap());
    }

    #[tokio::test]
    async fn bounded_gives_up_after_the_backoffs_retries_naming_what_it_wrote() {
        let b = backoff(2);
        let items = [1, 2];
        let mut sending = Resend::bounded(&b, "writing the rebuilt edges", &items);
        for _ in 0..2 {
            assert!(!sending.settle(Ok((vec![0], throttled()))).await.unwrap());
        }
        let e = sending
            .settle(Ok((vec![0], throttled())))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("writing the rebuilt edges"), "{e}");
        assert!(e.contains("gave up after 2 retries"), "{e}");
        assert!(e.contains("slow down"), "{e}");
    }

    #[tokio::test]
    async fn unbounded_resends_past_the_budget_until_done() {
        let b = backoff(1);
        let items = [1, 2, 3];
        let mut sending = Resend::new(&b, "a window's writes", &items);
        for _ in 0..5 {
            assert!(!sending.settle(Err(throttled().unwrap())).await.unwrap());
            assert_eq!(
                sending.todo(),
                [1, 2, 3],
                "a failed call leaves every item to send"
            );
        }
        assert!(sending.settle(Ok((vec![], None))).await.unwrap());
    }

    #[tokio::test]
    async fn a_failure_no_retry_mends_ends_it_at_once() {
        let b = backoff(10);
        let items = [1];
        let mut sending = Resend::new(&b, "writing", &items);
        let e = sending
            .settle(Err(PortError::Other("item too large".into())))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("item too large"), "{e}");
    }

    #[tokio::test]
    async fn items_left_undone_without_an_error_are_named_when_given_up_on() {
        let b = backoff(0);
        let items = [1];
        let mut sending = Resend::bounded(&b, "writing", &items);
        let e = sending.settle(Ok((vec![0], None))).await.unwrap_err();
        assert!(e.to_string().contains("writing: some left undone"), "{e}");
    }
}
