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
use std::task::{Context, Poll};

use thiserror::Error;

use crate::{Endpoint, ShardId};

/// A unit of work for a shard whose state is `S`.
pub type Job<S> = Box<dyn FnOnce(Rc<S>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

#[derive(Error, Debug, Clone, PartialEq, Eq)]
#[error("shard {0} has stopped")]
pub struct ShardStopped(pub ShardId);

/// The result of a dispatched job, still to come.
pub enum Pending<R: 'static> {
    /// The job runs on this shard; polling this future runs it.
    Local(Pin<Box<dyn Future<Output = R>>>),
    /// The job was sent to `owner`, which sends the result back.
    Remote {
        owner: ShardId,
        reply: flume::r#async::RecvFut<'static, R>,
    },
}

impl<R: 'static> Future for Pending<R> {
    type Output = Result<R, ShardStopped>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Pending::Local(work) => work.as_mut().poll(cx).map(Ok),
            Pending::Remote { owner, reply } => Pin::new(reply)
                .poll(cx)
                .map(|result| result.map_err(|_| ShardStopped(*owner))),
        }
    }
}

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
        self.dispatch(local, owner, job).await?.await
    }

    /// Hands `job` to `owner` and returns the future of its result, without waiting for it.
    ///
    /// Order: `job` itself (the closure, not the future it returns) is called on the owner
    /// in the order of the `dispatch` calls of one task: here at once when `owner` is this
    /// shard, otherwise by [`Router::serve`] in inbox order, before anything else runs. So a
    /// job that takes its place in a queue synchronously when called (see
    /// [`crate::Turns`]) keeps the order its sender dispatched it in, however long the owner's
    /// inbox makes the sender wait. Waits only while the owner's inbox is full.
    pub async fn dispatch<F, Fut, R>(
        &self,
        local: &Rc<S>,
        owner: ShardId,
        job: F,
    ) -> Result<Pending<R>, ShardStopped>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if owner == self.endpoint.id() {
            return Ok(Pending::Local(Box::pin(job(local.clone()))));
        }
        let (reply_tx, reply_rx) = flume::bounded(1);
        let boxed: Job<S> = Box::new(move |state| {
            let work = job(state);
            Box::pin(async move {
                // The caller may have given up (its connection closed); nothing to do then.
                let _ = reply_tx.send(work.await);
            })
        });
        self.endpoint
            .send(owner, boxed)
            .await
            .map_err(|_| ShardStopped(owner))?;
        Ok(Pending::Remote {
            owner,
            reply: reply_rx.into_recv_async(),
        })
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

    /// Serves jobs sent to this shard until every sender is gone. Each job is called here,
    /// in inbox order, and the future it returns runs as its own task, so a slow one never
    /// blocks the inbox.
    pub async fn serve(&self, state: Rc<S>) {
        while let Some(job) = self.endpoint.recv().await {
            let work = job(state.clone());
            glommio::spawn_local(work).detach();
        }
    }

    /// Closes this shard's inbox once it serves no more: jobs waiting in it, or sent to it
    /// from now on, are dropped, so their callers get `ShardStopped` instead of waiting
    /// forever. Dropping the router does the same.
    pub fn close(&self) {
        self.endpoint.close();
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

    /// Runs `shard_main(id, router)` on `shard_count` shards whose inboxes hold
    /// `inbox_capacity` jobs, and returns their results by shard.
    fn run_routers<S, G, F, T>(shard_count: usize, inbox_capacity: usize, shard_main: G) -> Vec<T>
    where
        S: 'static,
        G: Fn(ShardId, Rc<Router<S>>) -> F + Send + Clone + 'static,
        F: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let endpoints = Mesh::endpoints::<Job<S>>(shard_count, inbox_capacity);
        let endpoints = Mutex::new(endpoints.into_iter().map(Some).collect::<Vec<_>>());
        let endpoints = std::sync::Arc::new(endpoints);
        let config = ShardsConfig {
            shard_count,
            io_memory_bytes: 1 << 16,
            ring_depth: 32,
            pinned: true,
        };
        run_shards(&config, move |id| {
            // Taking this shard's endpoint once at start-up; the lock is never on a data path.
            let endpoint = endpoints.lock().expect("not poisoned")[id]
                .take()
                .expect("once");
            shard_main(id, Rc::new(Router::new(endpoint)))
        })
        .expect("run")
    }

    struct Counter {
        id: ShardId,
        hits: Cell<u32>,
    }

    #[test]
    fn calls_reach_the_owner_and_local_calls_run_in_place() {
        let shard_count = online_cpus().len().min(2);
        let results = run_routers::<Counter, _, _, _>(shard_count, 8, move |id, router| {
            async move {
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
        });
        for seen in results {
            assert_eq!(seen, (0..shard_count).collect::<Vec<_>>());
        }
    }

    /// Jobs are called on the owner in the order one task dispatched them, however long a
    /// full inbox makes it wait, and even when their futures finish in another order.
    #[test]
    fn dispatched_jobs_are_called_in_dispatch_order_through_a_full_inbox() {
        if online_cpus().len() < 2 {
            return; // needs a second shard on its own CPU
        }
        const JOBS: u32 = 200;
        struct Calls {
            order: std::cell::RefCell<Vec<u32>>,
            done: Cell<u32>,
        }
        let results = run_routers::<Calls, _, _, _>(2, 1, move |id, router| {
            async move {
                let state = Rc::new(Calls {
                    order: std::cell::RefCell::new(Vec::new()),
                    done: Cell::new(0),
                });
                if id == 1 {
                    // The owner: slow to drain its one-message inbox at first.
                    glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
                    let server = glommio::spawn_local({
                        let (router, state) = (router.clone(), state.clone());
                        async move { router.serve(state).await }
                    })
                    .detach();
                    // Until every reply is sent: an executor that stops drops its tasks
                    // without running them to their end.
                    while state.done.get() < JOBS {
                        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    server.cancel();
                    return state.order.borrow().clone();
                }
                let mut pending = Vec::new();
                for number in 0..JOBS {
                    let job = move |owner: Rc<Calls>| {
                        owner.order.borrow_mut().push(number);
                        async move {
                            // Later jobs finish first: only the calls must keep their order.
                            let wait = u64::from(JOBS - number) * 10;
                            glommio::timer::sleep(std::time::Duration::from_micros(wait)).await;
                            owner.done.set(owner.done.get() + 1);
                        }
                    };
                    pending.push(router.dispatch(&state, 1, job).await.expect("alive"));
                }
                for reply in pending {
                    reply.await.expect("answered");
                }
                Vec::new()
            }
        });
        assert_eq!(results[1], (0..JOBS).collect::<Vec<_>>());
    }

    /// A shard that closes its inbox fails the calls waiting in it, the ones blocked on its
    /// full inbox and the ones made afterwards, each with `ShardStopped` and none hanging.
    #[test]
    fn calls_to_a_shard_that_closed_fail_instead_of_waiting() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        use std::time::Duration;
        if online_cpus().len() < 2 {
            return; // needs a second shard on its own CPU
        }
        let queued = Arc::new(AtomicBool::new(false));
        let results = run_routers::<(), _, _, _>(2, 1, move |id, router| {
            let queued = queued.clone();
            async move {
                let state = Rc::new(());
                if id == 1 {
                    // Never serves: closes once a call waits in its inbox and another
                    // waits for room in it.
                    while !queued.load(Ordering::SeqCst) {
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                    router.close();
                    return Vec::new();
                }
                let job = |_: Rc<()>| async { 7 };
                let first = router.dispatch(&state, 1, job).await.expect("room for one");
                let blocked = glommio::spawn_local({
                    let (router, state) = (router.clone(), state.clone());
                    async move { router.call(&state, 1, job).await }
                })
                .detach();
                queued.store(true, Ordering::SeqCst);
                let within = |wait: Pin<Box<dyn Future<Output = Result<i32, ShardStopped>>>>| {
                    futures_lite::future::or(async move { Some(wait.await) }, async {
                        glommio::timer::sleep(Duration::from_secs(10)).await;
                        None
                    })
                };
                let first = within(Box::pin(first)).await;
                let blocked = within(Box::pin(async { blocked.await.expect("not cancelled") }));
                let blocked = blocked.await;
                // The inbox is closed by now (the first call failed): refused at once.
                let later = within(Box::pin(router.call(&state, 1, job))).await;
                vec![first, blocked, later]
            }
        });
        let stopped = Some(Err(ShardStopped(1)));
        assert_eq!(results[0], vec![stopped.clone(), stopped.clone(), stopped]);
    }
}
