//! The client for callers without an executor (the `ringlog` command-line tools): one
//! glommio `LocalExecutor` on the caller's thread drives the same async [`crate::Cluster`]
//! and [`crate::Connection`] the bench runs on its shards, one call at a time.
//!
//! Invariants:
//! - Every future of the client runs inside [`Cluster::run`] (or [`run`]), and the sockets
//!   are dropped inside it too, on the executor that opened them.
//! - The executor asks for at most [`IO_MEMORY_BYTES`] of locked io memory (a process here
//!   may lock 8 MiB, and the tools do no file I/O through it).
//! - Calls block the thread until their answer or their timeout
//!   ([`crate::connection::REQUEST_TIMEOUT`]); nothing runs in the background between calls.

use std::future::Future;

use anyhow::{anyhow, Result};
use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};
use kafka_protocol::messages::MetadataResponse;
use kafka_protocol::protocol::Request;

use crate::cluster::TopicInfo;

/// Locked io memory of one blocking executor.
pub const IO_MEMORY_BYTES: usize = 256 << 10;

/// An unpinned executor on this thread, for the blocking client.
pub fn executor() -> Result<LocalExecutor> {
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(IO_MEMORY_BYTES)
        .name("ringlog-client")
        .make()
        .map_err(|e| anyhow!("starting an executor: {e}"))
}

/// Runs `future` to completion on a fresh executor on this thread.
pub fn run<T>(future: impl Future<Output = T>) -> Result<T> {
    Ok(executor()?.run(future))
}

/// A [`crate::Cluster`] with its own executor; every method blocks until it is done.
pub struct Cluster {
    executor: LocalExecutor,
    /// Present from connect until drop, which closes it on the executor.
    inner: Option<crate::Cluster>,
}

impl Cluster {
    /// Connects to the first reachable of `servers` (comma-separated host:port).
    pub fn connect(servers: &str, client_id: &'static str) -> Result<Cluster> {
        let executor = executor()?;
        let inner = executor.run(crate::Cluster::connect(servers, client_id))?;
        Ok(Cluster {
            executor,
            inner: Some(inner),
        })
    }

    fn parts(&mut self) -> (&LocalExecutor, &mut crate::Cluster) {
        let inner = self.inner.as_mut().expect("the cluster lives until drop");
        (&self.executor, inner)
    }

    /// Runs `call` on the async cluster and waits for it.
    pub fn run<T>(&mut self, call: impl AsyncFnOnce(&mut crate::Cluster) -> T) -> T {
        let (executor, cluster) = self.parts();
        executor.run(call(cluster))
    }

    /// The bootstrap connection, for requests any broker answers.
    pub fn any(&mut self) -> Connection<'_> {
        let (executor, cluster) = self.parts();
        Connection {
            executor,
            inner: cluster.any(),
        }
    }

    /// A connection to broker `node_id`, opened on first use.
    pub fn broker(&mut self, node_id: i32) -> Result<Connection<'_>> {
        let (executor, cluster) = self.parts();
        let inner = executor.run(cluster.broker(node_id))?;
        Ok(Connection { executor, inner })
    }

    /// Node ids of every known broker, sorted.
    pub fn broker_ids(&mut self) -> Vec<i32> {
        self.parts().1.broker_ids()
    }

    /// Drops the connection to `node_id` so the next use reconnects.
    pub fn forget(&mut self, node_id: i32) {
        self.run(async |cluster| cluster.forget(node_id));
    }

    /// Metadata for `topics` (`None`: all topics; `Some(&[])`: none, brokers only).
    pub fn metadata(&mut self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        self.run(async |cluster| cluster.metadata(topics).await)
    }

    /// One topic's layout, or the topic's error (UNKNOWN_TOPIC_OR_PARTITION when missing).
    pub fn topic(&mut self, name: &str) -> Result<TopicInfo> {
        self.run(async |cluster| cluster.topic(name).await)
    }

    /// Every topic's layout, sorted by name.
    pub fn topics(&mut self) -> Result<Vec<TopicInfo>> {
        self.run(async |cluster| cluster.topics().await)
    }

    /// The node coordinating `group`.
    pub fn coordinator(&mut self, group: &str) -> Result<i32> {
        self.run(async |cluster| cluster.coordinator(group).await)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.executor.run(async move { drop(inner) });
        }
    }
}

/// One broker's connection of a blocking [`Cluster`].
pub struct Connection<'a> {
    executor: &'a LocalExecutor,
    inner: &'a mut crate::Connection,
}

impl Connection<'_> {
    /// host:port of the broker.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The version of `R` to build and send on this connection.
    pub fn version<R: Request>(&self) -> Result<i16> {
        self.inner.version::<R>()
    }

    /// True when the broker offers `R` at any version this client speaks.
    pub fn supports<R: Request>(&self) -> bool {
        self.inner.supports::<R>()
    }

    /// Runs `call` on the async connection and waits for it.
    pub fn run<T>(&mut self, call: impl AsyncFnOnce(&mut crate::Connection) -> T) -> T {
        self.executor.run(call(self.inner))
    }

    /// Sends `request` at `version` and waits for its answer.
    pub fn call_at<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response> {
        self.executor.run(self.inner.call_at(version, request))
    }

    /// Sends `request` without waiting for an answer (Produce with acks=0).
    pub fn send_at<R: Request>(&mut self, version: i16, request: &R) -> Result<i32> {
        self.executor.run(self.inner.send_at(version, request))
    }
}
