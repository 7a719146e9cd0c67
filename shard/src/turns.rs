//! Turns: a shard-local FIFO that makes work run in the order it was queued, however the
//! executor schedules the tasks doing it.
//!
//! ```text
//!   take() ─▶ ticket 7   take() ─▶ ticket 8        (synchronous: the order of the calls)
//!   ticket 7 waits for its turn, works, drops ─▶ turn 8 begins, ticket 8's waker is woken
//! ```
//!
//! Invariants: tickets are numbered in the order [`Turns::take`] is called, and ticket `n`'s
//! [`Ticket::wait`] resolves only after every ticket before it was dropped; dropping a
//! ticket (finished, failed or cancelled, waiting or not) ends its turn, so an abandoned
//! ticket never stalls the ones behind it. Only the next ticket's waker is woken when a turn
//! ends, so a long queue costs one wake-up per turn. No locks, no atomics: `Turns` never
//! leaves its shard.
//!
//! A semaphore with one permit is not a FIFO here: glommio's wakes a waiter without handing
//! it the permit, so a task that asks between the wake and the waiter's poll takes it first.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Turns {
    /// The number the next ticket gets.
    next: Cell<u64>,
    /// The ticket whose turn it is.
    current: Cell<u64>,
    /// Tickets dropped before their turn came; skipped when it does.
    dropped_early: RefCell<BTreeSet<u64>>,
    /// Wakers of tickets waiting for their turn, by ticket number.
    waiting: RefCell<BTreeMap<u64, Waker>>,
}

/// A place in the queue; its turn ends when it is dropped.
pub struct Ticket {
    turns: Rc<Turns>,
    number: u64,
}

impl Turns {
    pub fn new() -> Rc<Turns> {
        Rc::new(Turns::default())
    }

    /// Takes the next place in the queue, now (not when a future is first polled).
    pub fn take(self: &Rc<Self>) -> Ticket {
        let number = self.next.get();
        self.next.set(number + 1);
        Ticket {
            turns: self.clone(),
            number,
        }
    }

    /// Tickets taken and not yet dropped.
    pub fn queued(&self) -> u64 {
        self.next.get() - self.current.get() - self.dropped_early.borrow().len() as u64
    }

    fn finish(&self, number: u64) {
        if number != self.current.get() {
            self.dropped_early.borrow_mut().insert(number);
            self.waiting.borrow_mut().remove(&number);
            return;
        }
        let mut current = number + 1;
        {
            let mut dropped_early = self.dropped_early.borrow_mut();
            while dropped_early.remove(&current) {
                current += 1;
            }
        }
        self.current.set(current);
        let waker = self.waiting.borrow_mut().remove(&current);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Ticket {
    /// Resolves once every earlier ticket has been dropped.
    pub fn wait(&self) -> Wait<'_> {
        Wait { ticket: self }
    }

    pub fn is_turn(&self) -> bool {
        self.turns.current.get() == self.number
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.turns.finish(self.number);
    }
}

pub struct Wait<'a> {
    ticket: &'a Ticket,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ticket.is_turn() {
            return Poll::Ready(());
        }
        let mut waiting = self.ticket.turns.waiting.borrow_mut();
        waiting.insert(self.ticket.number, cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(test: impl Future<Output = ()> + 'static) {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 16)
            .make()
            .expect("executor")
            .run(test);
    }

    #[test]
    fn turns_follow_the_order_tickets_were_taken_not_the_order_tasks_run() {
        run(async {
            let turns = Turns::new();
            let order = Rc::new(RefCell::new(Vec::new()));
            let tickets: Vec<Ticket> = (0..5).map(|_| turns.take()).collect();
            let mut tasks = Vec::new();
            // Spawned last to first, and the early ones take longer to get going.
            for (index, ticket) in tickets.into_iter().enumerate().rev() {
                let order = order.clone();
                tasks.push(glommio::spawn_local(async move {
                    glommio::timer::sleep(Duration::from_millis(10 - 2 * index as u64)).await;
                    ticket.wait().await;
                    order.borrow_mut().push(index);
                }));
            }
            for task in tasks {
                task.await;
            }
            assert_eq!(*order.borrow(), vec![0, 1, 2, 3, 4]);
            assert_eq!(turns.queued(), 0);
        });
    }

    #[test]
    fn a_dropped_ticket_gives_up_its_turn_waiting_or_not() {
        run(async {
            let turns = Turns::new();
            let first = turns.take();
            let second = turns.take();
            let third = turns.take();
            let fourth = turns.take();
            assert!(first.is_turn() && !second.is_turn());
            // A ticket abandoned before its turn (a cancelled request) is skipped.
            drop(third);
            let waiter = glommio::spawn_local(async move {
                fourth.wait().await;
                fourth.is_turn()
            });
            glommio::yield_if_needed().await;
            drop(first);
            assert!(second.is_turn());
            drop(second);
            assert!(waiter.await);
            assert_eq!(turns.queued(), 0);
        });
    }
}
