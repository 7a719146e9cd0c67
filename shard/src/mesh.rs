//! The mesh: one bounded inbox per shard, and every shard holding a sender to each.
//!
//! Invariants:
//! - Messages are owned values moved between cores; nothing behind them is shared mutably.
//! - Every inbox is bounded (`capacity` messages). A sender facing a full inbox either waits
//!   (`send`, back-pressure) or gets its message handed back (`try_send`); a message is
//!   never dropped silently.
//! - An endpoint is built on the launching thread and moved, whole, into its shard.

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
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..shard_count).map(|_| flume::bounded(capacity)).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(id, inbox)| Endpoint {
                id,
                senders: senders.clone(),
                inbox,
            })
            .collect()
    }
}

/// One shard's view of the mesh: its own inbox and a sender to every shard (itself included).
pub struct Endpoint<T> {
    id: ShardId,
    senders: Vec<flume::Sender<T>>,
    inbox: flume::Receiver<T>,
}

impl<T> Endpoint<T> {
    pub fn id(&self) -> ShardId {
        self.id
    }

    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    /// Delivers `message` to `target`, waiting while its inbox is full.
    pub async fn send(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        self.senders[target]
            .send_async(message)
            .await
            .map_err(|flume::SendError(message)| SendError::Stopped(target, message))
    }

    /// Delivers `message` to `target` only if its inbox has room now.
    pub fn try_send(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        self.senders[target]
            .try_send(message)
            .map_err(|error| match error {
                flume::TrySendError::Full(message) => SendError::Full(target, message),
                flume::TrySendError::Disconnected(message) => SendError::Stopped(target, message),
            })
    }

    /// A `Send` handle for threads outside the mesh.
    pub fn remote(&self) -> Remote<T> {
        Remote {
            senders: self.senders.clone(),
        }
    }

    /// The next message for this shard; `None` once every sender is gone.
    pub async fn recv(&self) -> Option<T> {
        self.inbox.recv_async().await.ok()
    }
}

/// Sends into the mesh from outside it (the launching thread, a signal handler thread).
pub struct Remote<T> {
    senders: Vec<flume::Sender<T>>,
}

impl<T> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Remote {
            senders: self.senders.clone(),
        }
    }
}

impl<T> Remote<T> {
    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    /// Blocks the calling (non-shard) thread until `target` has room.
    pub fn send_blocking(&self, target: ShardId, message: T) -> Result<(), SendError<T>> {
        self.senders[target]
            .send(message)
            .map_err(|flume::SendError(message)| SendError::Stopped(target, message))
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
