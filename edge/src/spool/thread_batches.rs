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
    /// turn of the runtime had their chance to join.
    pub(super) async fn append(self: &Arc<Self>, event: NewEvent) -> Result<Appended, AppendError> {
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
