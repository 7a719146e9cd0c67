//! A shard-local wake-up signal: tasks wait for "something changed", a producer fires it.
//!
//! Invariants: no locks and no atomics, because a `Notify` never leaves its shard (`!Send`
//! through `Rc`). A waiter that registered before `notify_all` is always woken; waiters
//! that arrive later wait for the next notification. The generation counter makes a
//! notification that lands between "check the condition" and "register" impossible to miss
//! as long as the waiter reads [`Notify::generation`] before checking its condition.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Notify {
    pub fn new() -> Notify {
        Notify::default()
    }

    /// The current generation; pass it to [`Notify::changed_since`].
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get() + 1);
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers {
            waker.wake();
        }
    }

    /// Resolves once a notification happened after `generation` was read.
    pub fn changed_since(&self, generation: u64) -> Changed<'_> {
        Changed {
            notify: self,
            generation,
        }
    }
}

pub struct Changed<'a> {
    notify: &'a Notify,
    generation: u64,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut wakers = self.notify.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn wakes_registered_waiters_and_not_later_ones() {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 16)
            .make()
            .expect("executor")
            .run(async {
                let notify = Rc::new(Notify::new());
                let before = notify.generation();
                let waiter = {
                    let notify = notify.clone();
                    glommio::spawn_local(async move { notify.changed_since(before).await })
                };
                glommio::yield_if_needed().await;
                notify.notify_all();
                waiter.await;
                // A waiter created after the notification waits for the next one.
                let after = notify.generation();
                let pending = futures_lite::future::poll_once(notify.changed_since(after)).await;
                assert!(pending.is_none());
                // But a stale generation resolves at once.
                assert!(
                    futures_lite::future::poll_once(notify.changed_since(before))
                        .await
                        .is_some()
                );
            });
    }
}
