//! The lines waiting for stdout, bounded in bytes: an MCP host that stops
//! reading must not make the shim hold everything the application says.
//!
//! A reply to a request waits for room (a reply is never lost: its task,
//! and with it the request, waits); a notification that does not fit is
//! dropped (notifications are best effort), counted, and the count logged
//! once the burst is over. Lines leave in the order they were queued.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// The most bytes of lines queued for stdout at once.
pub const BUDGET: usize = 4 * 1024 * 1024;

/// One line for stdout, holding its room in the budget until written. An
/// empty line (holding none) tells the writer to finish.
pub struct Queued {
    pub line: String,
    _room: Option<OwnedSemaphorePermit>,
}

/// The sending side; clones share the budget.
#[derive(Clone)]
pub struct Outbox {
    lines: mpsc::UnboundedSender<Queued>,
    room: Arc<Semaphore>,
    /// Notifications dropped since the last one that fitted.
    dropped: Arc<AtomicU64>,
}

impl Outbox {
    /// An outbox of `budget` bytes, and the receiving end for the writer.
    pub fn new(budget: usize) -> (Self, mpsc::UnboundedReceiver<Queued>) {
        let (lines, queued) = mpsc::unbounded_channel();
        let outbox = Self {
            lines,
            room: Arc::new(Semaphore::new(budget)),
            dropped: Arc::default(),
        };
        (outbox, queued)
    }

    /// Queues a reply, waiting for room. False once the writer is gone.
    pub async fn reply(&self, line: String) -> bool {
        let cost = self.cost(&line);
        let Ok(room) = self.room.clone().acquire_many_owned(cost).await else {
            return false;
        };
        self.lines
            .send(Queued {
                line,
                _room: Some(room),
            })
            .is_ok()
    }

    /// Queues a notification if it fits now; else drops it. False once the
    /// writer is gone.
    pub fn notify(&self, line: String) -> bool {
        let Ok(room) = self.room.clone().try_acquire_many_owned(self.cost(&line)) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return !self.lines.is_closed();
        };
        self.report_dropped();
        self.lines
            .send(Queued {
                line,
                _room: Some(room),
            })
            .is_ok()
    }

    /// Tells the writer to finish once what is queued is written.
    pub fn finish(&self) {
        self.report_dropped();
        let _ = self.lines.send(Queued {
            line: String::new(),
            _room: None,
        });
    }

    /// Logs the notifications dropped in the burst just over, if any.
    fn report_dropped(&self) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "dropped notifications: the MCP client was not reading stdout (at most {BUDGET} bytes wait for it)"
            );
        }
    }

    /// A line's room in the budget, its `\n` included; a line longer than
    /// the whole budget takes all of it.
    fn cost(&self, line: &str) -> u32 {
        let budget = u32::try_from(BUDGET).expect("the budget fits in u32");
        u32::try_from(line.len() + 1).map_or(budget, |cost| cost.min(budget))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn notifications_that_do_not_fit_are_dropped_and_replies_wait() {
        let (outbox, mut queued) = Outbox::new(BUDGET);
        let big = "n".repeat(BUDGET / 4);
        for _ in 0..10 {
            assert!(outbox.notify(big.clone()));
        }
        assert_eq!(outbox.dropped.load(Ordering::Relaxed), 10 - 3);
        // A reply waits for room rather than being dropped…
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            let reply = "r".repeat(BUDGET / 2);
            async move { outbox.reply(reply).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the reply waits for room");
        // …and goes once the writer has written what was queued before it.
        for _ in 0..3 {
            assert_eq!(queued.recv().await.unwrap().line.len(), BUDGET / 4);
        }
        assert!(waiting.await.unwrap());
        assert_eq!(queued.recv().await.unwrap().line.len(), BUDGET / 2);
        // The next notification that fits ends the burst (and logs it).
        assert!(outbox.notify("{}".into()));
        assert_eq!(outbox.dropped.load(Ordering::Relaxed), 0);
    }
}
