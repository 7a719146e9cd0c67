//! A shard-local wake-up signal: tasks wait for "something changed", a producer fires it.
//! Shared by the crates that must not depend on each other (`shard` and the broker's
//! partition signals; `storage`'s writer and waiters).
//!
//! Invariants: no locks and no atomics, because a `Notify` never leaves its shard (`!Send`
//! through `Rc`). A waiter that registered before `notify_all` is always woken; waiters
//! that arrive later wait for the next notification. The generation counter makes a
//! notification that lands between "check the condition" and "register" impossible to miss
//! as long as the waiter reads [`Notify::generation`] before checking its condition
//! ([`Notify::wait_until`] does).
//!
//! A waiter holds one slot while it waits and gives it back when it is dropped (a fetch's
//! long poll that times out, a request whose connection closed), so the waiters held are
//! the waiters alive, and registering costs the same however many wait: a signal that
//! rarely fires (shutdown, an idle partition) does not collect the wakers, and through them
//! the tasks, of everyone who ever waited on it. A slot is the waiter's only while the
//! generation it registered in lasts: `notify_all` empties every slot and moves the
//! generation on, after which the slot number may be another waiter's.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use slab::Slab;

#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    waiters: RefCell<Slab<Waker>>,
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
        // Taken out first: a waker may run code that registers on this signal again.
        let mut waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in waiters.drain() {
            waker.wake();
        }
        // The emptied slab keeps its capacity for the next generation's waiters.
        let mut current = self.waiters.borrow_mut();
        if current.is_empty() {
            *current = waiters;
        }
    }

    /// Waiters registered now (pending [`Changed`] futures that were polled).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiters.borrow().len()
    }

    /// Returns once `ready` holds, checking it at the call and after every notification
    /// (single-threaded: none can land between a check and the registration after it).
    pub async fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        loop {
            let generation = self.generation();
            if ready() {
                return;
            }
            self.changed_since(generation).await;
        }
    }

    /// Resolves once a notification happened after `generation` was read.
    pub fn changed_since(&self, generation: u64) -> Changed<'_> {
        Changed {
            notify: self,
            generation,
            slot: None,
        }
    }
}

pub struct Changed<'a> {
    notify: &'a Notify,
    generation: u64,
    /// This waiter's slot, registered while `notify.generation` was `generation`.
    slot: Option<usize>,
}

impl Changed<'_> {
    /// The slot, when it is still this waiter's (no notification since it registered).
    fn own_slot(&self) -> Option<usize> {
        self.slot
            .filter(|_| self.notify.generation.get() == self.generation)
    }
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let notify = self.notify;
        if notify.generation.get() != self.generation {
            self.slot = None;
            return Poll::Ready(());
        }
        let mut waiters = notify.waiters.borrow_mut();
        match self.own_slot() {
            Some(slot) => {
                let waker = &mut waiters[slot];
                if !waker.will_wake(cx.waker()) {
                    waker.clone_from(cx.waker());
                }
            }
            None => self.slot = Some(waiters.insert(cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.own_slot() {
            self.notify.waiters.borrow_mut().remove(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn on_executor(test: impl Future<Output = ()> + 'static) {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 16)
            .make()
            .expect("executor")
            .run(test);
    }

    #[test]
    fn wakes_registered_waiters_and_not_later_ones() {
        on_executor(async {
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

    #[test]
    fn wait_until_checks_at_the_call_and_after_each_notification() {
        on_executor(async {
            let notify = Rc::new(Notify::new());
            let value = Rc::new(std::cell::Cell::new(0));
            let waiter = {
                let (notify, value) = (notify.clone(), value.clone());
                glommio::spawn_local(async move {
                    notify.wait_until(|| value.get() >= 2).await;
                })
            };
            glommio::yield_if_needed().await;
            assert_eq!(notify.waiting(), 1);
            value.set(1);
            notify.notify_all();
            glommio::executor().yield_task_queue_now().await;
            assert_eq!(notify.waiting(), 1, "not ready yet: registered again");
            value.set(2);
            notify.notify_all();
            waiter.await;
            assert_eq!(notify.waiting(), 0);
            // Ready at the call: no registration; a waiter that gives up leaves none.
            assert!(futures_lite::future::poll_once(notify.wait_until(|| true))
                .await
                .is_some());
            assert!(futures_lite::future::poll_once(notify.wait_until(|| false))
                .await
                .is_none());
            assert_eq!(notify.waiting(), 0);
        });
    }

    /// A waker that counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn counting() -> (std::sync::Arc<Counting>, Waker) {
        let counter = std::sync::Arc::new(Counting(Default::default()));
        (counter.clone(), Waker::from(counter))
    }

    fn poll(future: &mut Changed<'_>, waker: &Waker) -> Poll<()> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_nothing_behind() {
        // A long poll that times out on a signal that never fires (shutdown): without the
        // slot given back, every one of them stays registered, with its task.
        let notify = Notify::new();
        for _ in 0..1000 {
            let (_, waker) = counting();
            let mut waiter = notify.changed_since(notify.generation());
            assert!(poll(&mut waiter, &waker).is_pending());
            assert!(poll(&mut waiter, &waker).is_pending());
            assert_eq!(
                notify.waiting(),
                1,
                "one slot per waiter, however often polled"
            );
        }
        assert_eq!(notify.waiting(), 0);
    }

    #[test]
    fn a_waiter_polled_by_another_task_wakes_that_task() {
        let notify = Notify::new();
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let mut waiter = notify.changed_since(notify.generation());
        assert!(poll(&mut waiter, &first_waker).is_pending());
        assert!(poll(&mut waiter, &second_waker).is_pending());
        assert_eq!(notify.waiting(), 1);
        notify.notify_all();
        assert_eq!(first.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(second.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(poll(&mut waiter, &second_waker).is_ready());
    }

    #[test]
    fn a_slot_reused_after_a_notification_stays_its_new_owners() {
        // The first waiter's slot is emptied by the notification and taken by the second;
        // dropping the first must not take the second's registration with it.
        let notify = Notify::new();
        let (_, first_waker) = counting();
        let mut first = notify.changed_since(notify.generation());
        assert!(poll(&mut first, &first_waker).is_pending());
        notify.notify_all();
        let (second, second_waker) = counting();
        let mut second_waiter = notify.changed_since(notify.generation());
        assert!(poll(&mut second_waiter, &second_waker).is_pending());
        drop(first);
        assert_eq!(notify.waiting(), 1);
        notify.notify_all();
        assert_eq!(second.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(poll(&mut second_waiter, &second_waker).is_ready());
        assert_eq!(notify.waiting(), 0);
    }
}
