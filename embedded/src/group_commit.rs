//! Writes that queue for one connection, committed together: whichever call holds the
//! connection next writes every call queued by then in one transaction, and hands each its own
//! answer. When a handle's shards close windows at once, a part's commit (and the checkpoint
//! that copies its pages back) rewrites each page they touch once, not once a window
//! (BENCHMARKS, "Windows that wait, committed together").
//!
//! Each call is still its own: what `write` gives it (on SQLite, each call in a savepoint of
//! its own: a call that fails is rolled back alone), and the commit's failure if the commit
//! fails. A call's answer is sent only once the transaction that wrote it is committed (or
//! failed), before the connection is let go.

use std::sync::{mpsc, Mutex};

use rusqlite::Connection;
use tally_core::ports::{PortError, PortResult};

use crate::locked;

/// The calls waiting for one connection, each with where its answer goes.
pub(crate) struct GroupCommit<J, R> {
    queue: Mutex<Vec<(J, mpsc::SyncSender<PortResult<R>>)>>,
}

impl<J, R> Default for GroupCommit<J, R> {
    fn default() -> Self {
        GroupCommit {
            queue: Mutex::new(Vec::new()),
        }
    }
}

impl<J, R> GroupCommit<J, R> {
    /// Writes `job` on `conn`, with every call queued beside it: `write` is given the calls in
    /// the order they queued and answers each, in that order. Blocks until `job` is written.
    pub(crate) fn run(
        &self,
        conn: &Mutex<Connection>,
        job: J,
        write: impl FnOnce(&mut Connection, Vec<J>) -> Vec<PortResult<R>>,
    ) -> PortResult<R> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.lock_queue().push((job, answer));
        let written_before = locked(conn, |c| {
            // Written by the call that held the connection before: answered already (and the
            // calls queued since are written by their own callers, each of whom comes here).
            if let Ok(done) = answered.try_recv() {
                return Ok(Some(done));
            }
            let (jobs, answers): (Vec<J>, Vec<_>) =
                std::mem::take(&mut *self.lock_queue()).into_iter().unzip();
            let out = write(c, jobs);
            debug_assert_eq!(out.len(), answers.len(), "one answer a call");
            for (answer, out) in answers.into_iter().zip(out) {
                // The caller is waiting on it: its receiver lives until it has it.
                let _ = answer.send(out);
            }
            Ok(None)
        })?;
        match written_before {
            Some(done) => done,
            None => answered.recv().map_err(|_| {
                PortError::Other("embedded store: a write ended without an answer".into())
            })?,
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Vec<(J, mpsc::SyncSender<PortResult<R>>)>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Calls that queue while another holds the connection are written in one go, after it,
    /// each answered with its own result (one failing alone), in the order they queued.
    #[test]
    fn calls_that_wait_are_written_together_and_answered_each() {
        let conn = Arc::new(Mutex::new(Connection::open_in_memory().unwrap()));
        let group: Arc<GroupCommit<u32, u32>> = Arc::default();
        let writes: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
        // The connection held while three calls queue behind it.
        let held = conn.lock().unwrap();
        let calls: Vec<_> = (1..=3)
            .map(|job| {
                let (conn, group, writes) = (conn.clone(), group.clone(), writes.clone());
                std::thread::spawn(move || {
                    // Each pushes, then waits for the connection.
                    let out = group.run(&conn, job, |_, jobs| {
                        writes.lock().unwrap().push(jobs.clone());
                        jobs.iter()
                            .map(|j| match j {
                                2 => Err(PortError::Other("two fails".into())),
                                j => Ok(j * 10),
                            })
                            .collect()
                    });
                    (job, out)
                })
            })
            .collect();
        while group.lock_queue().len() < 3 {
            std::thread::yield_now();
        }
        drop(held);
        let mut answers: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
        answers.sort_by_key(|(job, _)| *job);
        assert_eq!(answers[0].1, Ok(10));
        assert!(answers[1].1.as_ref().is_err_and(|e| !e.is_retryable()));
        assert_eq!(answers[2].1, Ok(30));
        let writes = writes.lock().unwrap();
        assert_eq!(writes.len(), 1, "one write for the three: {writes:?}");
        let mut jobs = writes[0].clone();
        jobs.sort_unstable();
        assert_eq!(jobs, vec![1, 2, 3]);
    }
}
