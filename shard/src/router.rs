//! The router: the only way to reach state owned by a shard.
//!
//! A call names the owning shard and a job: a `Send` closure that runs on that shard with
//! the shard's own state and sends its result back. A call to the caller's own shard runs
//! the job in place, without a hop. The closure is the message: it carries owned data
//! across the core boundary and touches the target's state only once it runs there, so
//! shards never share mutable state.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use thiserror::Error;

use crate::{Endpoint, ShardId};

/// A unit of work for a shard whose state is `S`.
pub type Job<S> = Box<dyn FnOnce(Rc<S>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

#[derive(Error, Debug, PartialEq, Eq)]
#[error("shard {0} has stopped")]
pub struct ShardStopped(pub ShardId);

/// Routes jobs from one shard to any shard, itself included.
pub struct Router<S: 'static> {
    endpoint: Endpoint<Job<S>>,
}

impl<S: 'static> Router<S> {
    pub fn new(endpoint: Endpoint<Job<S>>) -> Router<S> {
        Router { endpoint }
    }

    pub fn shard_id(&self) -> ShardId {
        self.endpoint.id()
    }

    pub fn shard_count(&self) -> usize {
        self.endpoint.shard_count()
    }

    /// Runs `job` on `owner` and returns its result. `local` is this shard's own state,
    /// used when `owner` is this shard.
    pub async fn call<F, Fut, R>(
        &self,
        local: &Rc<S>,
        owner: ShardId,
        job: F,
    ) -> Result<R, ShardStopped>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if owner == self.endpoint.id() {
            return Ok(job(local.clone()).await);
        }
        let (reply_tx, reply_rx) = flume::bounded(1);
        let boxed: Job<S> = Box::new(move |state| {
            Box::pin(async move {
                // The caller may have given up (its connection closed); nothing to do then.
                let _ = reply_tx.send(job(state).await);
            })
        });
        self.endpoint
            .send(owner, boxed)
            .await
            .map_err(|_| ShardStopped(owner))?;
        reply_rx.recv_async().await.map_err(|_| ShardStopped(owner))
    }

    /// Runs `job` on `owner` without waiting for it to finish (a connection handed to the
    /// shard that serves it). Waits only while the owner's inbox is full.
    pub async fn spawn<F, Fut>(
        &self,
        local: &Rc<S>,
        owner: ShardId,
        job: F,
    ) -> Result<(), ShardStopped>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        if owner == self.endpoint.id() {
            glommio::spawn_local(job(local.clone())).detach();
            return Ok(());
        }
        let boxed: Job<S> = Box::new(move |state| Box::pin(job(state)));
        self.endpoint
            .send(owner, boxed)
            .await
            .map_err(|_| ShardStopped(owner))
    }

    /// Serves jobs sent to this shard until every sender is gone;
    /// each job runs as its own task so a slow one never blocks the inbox.
    pub async fn serve(&self, state: Rc<S>) {
        while let Some(job) = self.endpoint.recv().await {
            glommio::spawn_local(job(state.clone())).detach();
        }
    }

    /// A handle other threads can use to send jobs into the mesh (startup, signals).
    pub fn remote(&self) -> crate::mesh::Remote<Job<S>> {
        self.endpoint.remote()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{online_cpus, run_shards, ShardsConfig};
    use crate::Mesh;
    use std::cell::Cell;
    use std::sync::Mutex;

    struct Counter {
        id: ShardId,
        hits: Cell<u32>,
    }

    #[test]
    fn calls_reach_the_owner_and_local_calls_run_in_place() {
        let shard_count = online_cpus().len().min(2);
        let endpoints = Mesh::endpoints::<Job<Counter>>(shard_count, 8);
        let endpoints = Mutex::new(endpoints.into_iter().map(Some).collect::<Vec<_>>());
        let endpoints = std::sync::Arc::new(endpoints);
        let config = ShardsConfig {
            shard_count,
            io_memory_bytes: 1 << 16,
            ring_depth: 32,
        };
        let results = run_shards(&config, move |id| {
            // Taking this shard's endpoint once at start-up; the lock is never on a data path.
            let endpoint = endpoints.lock().expect("not poisoned")[id]
                .take()
                .expect("once");
            async move {
                let router = Rc::new(Router::new(endpoint));
                let state = Rc::new(Counter {
                    id,
                    hits: Cell::new(0),
                });
                let server = glommio::spawn_local({
                    let (router, state) = (router.clone(), state.clone());
                    async move { router.serve(state).await }
                })
                .detach();
                let mut seen = Vec::new();
                for target in 0..shard_count {
                    let owner = router
                        .call(&state, target, |s: Rc<Counter>| async move {
                            s.hits.set(s.hits.get() + 1);
                            s.id
                        })
                        .await
                        .expect("shard alive");
                    seen.push(owner);
                }
                // Wait until every shard's call has landed here before stopping.
                while state.hits.get() < shard_count as u32 {
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                }
                server.cancel();
                seen
            }
        })
        .expect("run");
        for seen in results {
            assert_eq!(seen, (0..shard_count).collect::<Vec<_>>());
        }
    }
}
