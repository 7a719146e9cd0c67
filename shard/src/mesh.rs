//! The mesh: one bounded inbox per shard, and every shard holding a sender to each.
//!
//! Invariants:
//! - Messages are owned values moved between cores; nothing behind them is shared mutably.
//! - Every inbox is bounded (`capacity` messages). A sender facing a full inbox either waits
//!   (`send`, back-pressure) or gets its message handed back (`try_send`).
//! - A shard closes its inbox when it stops (`Endpoint::close`, or dropping its endpoint).
//!   From then on no message waits in it: a send is refused, and a message that was queued,
//!   or went in while the inbox closed, is dropped (by the closing shard, or by its sender
//!   right after the send). A message that must be answered carries its reply channel, so
//!   dropping it tells the waiting caller that the shard stopped.
//! - An endpoint is built on the launching thread and moved, whole, into its shard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use thiserror::Error;

use crate::ShardId;

/// Why a message could not be delivered; the message comes back to the caller.
#[derive(Error, Debug)]
pub enum SendError<T> {
    #[error("shard {0} inbox is full")]
    Full(ShardId, T),
    #[error("shard {0} has stopped")]
    Stopped(ShardId, T),
}

impl<T> SendError<T> {
    pub fn into_message(self) -> T {
        match self {
            SendError::Full(_, message) | SendError::Stopped(_, message) => message,
        }
    }
}

/// The whole mesh, before it is split into per-shard endpoints.
pub struct Mesh;

impl Mesh {
    /// Builds `shard_count` endpoints whose inboxes hold `capacity` messages each.
    pub fn endpoints<T: Send>(shard_count: usize, capacity: usize) -> Vec<Endpoint<T>> {
        assert!(shard_count > 0 && capacity > 0);
        let (senders, inboxes): (Vec<_>, Vec<_>) =
            (0..shard_count).map(|_| flume::bounded(capacity)).unzip();
        let inboxes = Inboxes {
            closed: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
            receivers: inboxes,
        };
        let inboxes = Arc::new(inboxes);
        (0..shard_count)
            .map(|id| Endpoint {
                id,
                senders: senders.clone(),
                inboxes: inboxes.clone(),
            })
            .collect()
    }
}

/// The receiving ends of every inbox and whether each is closed, shared by all endpoints: a
/// shard reads only its own, and empties another's only when that one closed while the
/// shard's own message went in.
struct Inboxes<T> {
    closed: Box<[AtomicBool]>,
    receivers: Vec<flume::Receiver<T>>,
}

impl<T> Inboxes<T> {
    fn is_closed(&self, target: ShardId) -> bool {
        // SeqCst pairs with `close`: either the closing shard's drain sees a message that
        // went in before the flag was set, or its sender sees the flag after its send.
        self.closed[target].load(Ordering::SeqCst)
    }

    fn close(&self, target: ShardId) {
        self.closed[target].store(true, Ordering::SeqCst);
        self.empty(target);
    }

    /// Drops every message waiting in `target`'s closed inbox.
    fn empty(&self, target: ShardId) {
        drop(self.receivers[target].drain());
    }

    /// After a send that succeeded: a message that went into an inbox closing meanwhile
    /// must not wait there forever.
    fn after_send(&self, target: ShardId) {
        if self.is_closed(target) {
            self.empty(target);
        }
    }
}

/// One shard's view of the mesh: its own inbox and a sender to every shard (itself included).
pub struct Endpoint<T> {
    id: ShardId,
    senders: Vec<flume::Sender<T>>,
    inboxes: Arc<Inboxes<T>>,
}

impl<T> Endpoint<T> {
    pub fn id(&self) -> ShardId {
        self.id
    }

    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    /// Delivers `message` to `target`, waiting while its inbox is full. `Ok` means the
    /// message went in; if `target` closed meanwhile, it was dropped there (see the module's
    /// invariants).
    pub async fn send(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        if self.inboxes.is_closed(target) {
            return Err(SendError::Stopped(target, message));
        }
        self.senders[target]
            .send_async(message)
            .await
            .map_err(|flume::SendError(message)| SendError::Stopped(target, message))?;
        self.inboxes.after_send(target);
        Ok(())
    }

    /// Delivers `message` to `target` only if its inbox has room now.
    pub fn try_send(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        if self.inboxes.is_closed(target) {
            return Err(SendError::Stopped(target, message));
        }
        self.senders[target]
            .try_send(message)
            .map_err(|error| match error {
                flume::TrySendError::Full(message) => SendError::Full(target, message),
                flume::TrySendError::Disconnected(message) => SendError::Stopped(target, message),
            })?;
        self.inboxes.after_send(target);
        Ok(())
    }

    /// A `Send` handle for threads outside the mesh.
    pub fn remote(&self) -> Remote<T> {
        Remote {
            senders: self.senders.clone(),
            inboxes: self.inboxes.clone(),
        }
    }

    /// The next message for this shard; `None` once every sender is gone or the inbox is
    /// closed.
    pub async fn recv(&self) -> Option<T> {
        if self.inboxes.is_closed(self.id) {
            return None;
        }
        self.inboxes.receivers[self.id].recv_async().await.ok()
    }

    /// Closes this shard's inbox: every message waiting in it is dropped, and no message
    /// waits in it again.
    pub fn close(&self) {
        self.inboxes.close(self.id);
    }
}

impl<T> Drop for Endpoint<T> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sends into the mesh from outside it (the launching thread, a signal handler thread).
pub struct Remote<T> {
    senders: Vec<flume::Sender<T>>,
    inboxes: Arc<Inboxes<T>>,
}

impl<T> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Remote {
            senders: self.senders.clone(),
            inboxes: self.inboxes.clone(),
        }
    }
}

impl<T> Remote<T> {
    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    /// Blocks the calling (non-shard) thread until `target` has room.
    pub fn send_blocking(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        if self.inboxes.is_closed(target) {
            return Err(SendError::Stopped(target, message));
        }
        self.senders[target]
            .send(message)
            .map_err(|flume::SendError(message)| SendError::Stopped(target, message))?;
        self.inboxes.after_send(target);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_inbox_hands_the_message_back() {
        let endpoints = Mesh::endpoints::<u32>(2, 1);
        endpoints[0].try_send(1, 7).expect("room for one");
        match endpoints[0].try_send(1, 8) {
            Err(SendError::Full(1, 8)) => {}
            other => panic!("expected Full(1, 8), got {other:?}"),
        }
        let received = futures_lite::future::block_on(endpoints[1].recv());
        assert_eq!(received, Some(7));
    }

    #[test]
    fn a_closed_inbox_refuses_messages_and_keeps_none() {
        let endpoints = Mesh::endpoints::<Arc<()>>(2, 4);
        let token = Arc::new(());
        endpoints[0].try_send(1, token.clone()).expect("room");
        endpoints[1].close();
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "the queued message was dropped"
        );
        match endpoints[0].try_send(1, token.clone()) {
            Err(SendError::Stopped(1, _)) => {}
            other => panic!("expected Stopped, got {other:?}"),
        }
        let remote = endpoints[0].remote();
        assert!(matches!(
            remote.send_blocking(1, token.clone()),
            Err(SendError::Stopped(1, _))
        ));
        assert_eq!(Arc::strong_count(&token), 1);
        assert!(futures_lite::future::block_on(endpoints[1].recv()).is_none());
    }

    #[test]
    fn messages_cross_threads_in_order() {
        let mut endpoints = Mesh::endpoints::<u32>(2, 4);
        let receiver = endpoints.pop().expect("two endpoints");
        let sender = endpoints.pop().expect("two endpoints");
        let consumer = std::thread::spawn(move || {
            futures_lite::future::block_on(async {
                let mut seen = Vec::new();
                for _ in 0..100 {
                    seen.push(receiver.recv().await.expect("sender alive"));
                }
                seen
            })
        });
        futures_lite::future::block_on(async {
            for value in 0..100 {
                sender.send(1, value).await.expect("receiver alive");
            }
        });
        let seen = consumer.join().expect("consumer thread");
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }
}
