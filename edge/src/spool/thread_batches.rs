//! Appends gathered per thread: the requests one worker stores in a turn of its event
//! loop go to the writer as one message, and the batch's outcomes come back as one
//! completion that wakes the requests' tasks on their own thread. Each crossing to the
//! writer's thread costs a system call and a context switch, more than a request's
//! share of the fsync, so a request never crosses on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::append::{AppendError, Appended, NewEvent};
use super::shared::Shared;
use super::writer::Command;

/// One pending batch per stripe; a thread always uses the same stripe.
pub(super) struct ThreadBatches {
    stripes: Box<[Mutex<Vec<Waiting>>]>,
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
}

/// An append waiting for its batch to be sent, and where its outcome goes.
type Waiting = (NewEvent, oneshot::Sender<Result<Appended, AppendError>>);

impl ThreadBatches {
    pub(super) fn new(commands: mpsc::UnboundedSender<Command>, shared: Arc<Shared>) -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Mutex::new(Vec::new())).collect(),
            commands,
            shared,
        }
    }

    /// Adds `event` to this thread's batch; resolves with its outcome. The first append
    /// of a batch spawns the task that sends it, after the other tasks ready in this
    /// turn of the runtime had their chance to join. The body counts as queued (see
    /// `Spool::queue_full`) until the writer has committed it.
    pub(super) async fn append(self: &Arc<Self>, event: NewEvent) -> Result<Appended, AppendError> {
        self.shared
            .queued_bytes
            .fetch_add(event.body.len() as u64, Ordering::AcqRel);
        let (reply, answer) = oneshot::channel();
        let stripe = thread_stripe();
        let first = {
            let mut waiting = self.stripes[stripe].lock();
            waiting.push((event, reply));
            waiting.len() == 1
        };
        if first {
            // Spawned, not awaited here: the batch must go even if this request is
            // cancelled (its client gone) while others wait on it.
            tokio::spawn(Arc::clone(self).send(stripe));
        }
        answer.await.map_err(|_| AppendError::Closed)?
    }

    /// Sends the stripe's batch to the writer and hands each waiter its outcome. If the
    /// writer is gone, the waiters' senders drop and each sees `Closed`.
    async fn send(self: Arc<Self>, stripe: usize) {
        tokio::task::yield_now().await;
        let waiting = std::mem::take(&mut *self.stripes[stripe].lock());
        let (events, replies): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Append(events, _))) =
            self.commands.send(Command::Append(events, reply))
        {
            let bytes = events.iter().map(|e| e.body.len() as u64).sum();
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return;
        }
        let Ok(outcomes) = answer.await else {
            return;
        };
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            let _ = reply.send(outcome);
        }
    }
}

/// This thread's stripe: threads take stripes in turn as they first append, so up to
/// `STRIPES` workers never share one (sharing is correct, only less local).
fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|stripe| *stripe)
}

const STRIPES: usize = 64;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::config::SpoolSettings;
    use crate::spool::{Spool, SpoolMetrics};

    #[tokio::test(flavor = "current_thread")]
    async fn the_appends_of_one_turn_go_to_the_writer_as_one_message() {
        let (_dir, spool) = spool();
        let (batches, mut writer) = batches(&spool);
        let appends: Vec<_> = (0..5)
            .map(|i| tokio::spawn(append(&batches, &format!("e{i}"))))
            .collect();
        let (events, reply) = next_batch(&mut writer).await;
        assert_eq!(ids(&events), ["e0", "e1", "e2", "e3", "e4"]);
        assert_eq!(queued(&spool), 5 * BODY, "bodies count until committed");
        reply
            .send((1..=5).map(|seq| Ok(Appended::Stored { seq })).collect())
            .unwrap();
        for (seq, append) in (1..=5).zip(appends) {
            assert_eq!(append.await.unwrap(), Ok(Appended::Stored { seq }));
        }
        assert!(writer.try_recv().is_err(), "one message for the five");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_goes_even_if_the_append_that_began_it_is_cancelled() {
        let (_dir, spool) = spool();
        let (batches, mut writer) = batches(&spool);
        let first = tokio::spawn(append(&batches, "gone"));
        let second = tokio::spawn(append(&batches, "stays"));
        tokio::task::yield_now().await;
        first.abort();
        let (events, reply) = next_batch(&mut writer).await;
        assert_eq!(ids(&events), ["gone", "stays"]);
        reply
            .send(vec![
                Ok(Appended::Stored { seq: 1 }),
                Ok(Appended::Stored { seq: 2 }),
            ])
            .unwrap();
        assert_eq!(second.await.unwrap(), Ok(Appended::Stored { seq: 2 }));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_a_writer_an_append_is_refused_and_its_body_no_longer_counts() {
        let (_dir, spool) = spool();
        let (batches, writer) = batches(&spool);
        drop(writer);
        assert_eq!(append(&batches, "e").await, Err(AppendError::Closed));
        assert_eq!(queued(&spool), 0);
    }

    fn spool() -> (tempfile::TempDir, Spool) {
        let dir = tempfile::tempdir().unwrap();
        let settings = SpoolSettings {
            dir: dir.path().to_owned(),
            max_bytes: 1 << 20,
            segment_bytes: 4096,
            max_batch_delay: Duration::ZERO,
            high_water: 0.9,
            stall_timeout: Duration::from_secs(5),
            max_queued_bytes: 64 << 20,
            sync_delay: Duration::ZERO,
            retain_delivered: Duration::ZERO,
            preallocate: false,
        };
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = Spool::open(&settings, "pop1", HashMap::new(), metrics).unwrap();
        (dir, spool)
    }

    /// Batches in front of a writer the test plays (the spool's own is never sent to).
    fn batches(spool: &Spool) -> (Arc<ThreadBatches>, mpsc::UnboundedReceiver<Command>) {
        let (commands, writer) = mpsc::unbounded_channel();
        let batches = ThreadBatches::new(commands, Arc::clone(&spool.shared));
        (Arc::new(batches), writer)
    }

    fn append(
        batches: &Arc<ThreadBatches>,
        id: &str,
    ) -> impl Future<Output = Result<Appended, AppendError>> + use<> {
        let batches = Arc::clone(batches);
        let event = NewEvent {
            received_ms: 1,
            early: false,
            route: Arc::from("r"),
            event_id: id.to_owned(),
            headers: Vec::new(),
            body: Bytes::from(vec![b'b'; BODY as usize]),
            resend: false,
        };
        async move { batches.append(event).await }
    }

    type BatchReply = oneshot::Sender<Vec<Result<Appended, AppendError>>>;

    async fn next_batch(
        writer: &mut mpsc::UnboundedReceiver<Command>,
    ) -> (Vec<NewEvent>, BatchReply) {
        match tokio::time::timeout(Duration::from_secs(5), writer.recv()).await {
            Ok(Some(Command::Append(events, reply))) => (events, reply),
            _ => panic!("expected a batch of appends"),
        }
    }

    fn ids(events: &[NewEvent]) -> Vec<&str> {
        events.iter().map(|e| e.event_id.as_str()).collect()
    }

    fn queued(spool: &Spool) -> u64 {
        spool.shared.queued_bytes.load(Ordering::Acquire)
    }

    const BODY: u64 = 10;
}
