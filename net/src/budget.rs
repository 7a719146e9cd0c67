//! Byte budgets: a shard-local count of bytes that may be held at once, and reservations
//! against it that grow as data arrives and shrink to what was used.
//!
//! Invariants: a reservation holds exactly `bytes()` units of its budget and gives them
//! back when dropped; `grow` waits for units, `try_grow` never waits, `shrink_to` gives the
//! excess back at once. Waiters are served in arrival order by glommio's semaphore (it may
//! let a newcomer that fits go first). No locks, no atomics: a budget never leaves its shard.

use std::rc::Rc;

use glommio::sync::Semaphore;

/// Bytes that may be held at once, shared by everything on one shard that draws on it.
#[derive(Clone, Debug)]
pub struct Budget {
    units: Rc<Semaphore>,
    total_bytes: u64,
}

/// Bytes held from a [`Budget`] until dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Budget,
    bytes: u64,
}

impl Budget {
    pub fn new(total_bytes: usize) -> Budget {
        Budget {
            units: Rc::new(Semaphore::new(total_bytes as u64)),
            total_bytes: total_bytes as u64,
        }
    }

    pub fn total_bytes(&self) -> usize {
        self.total_bytes as usize
    }

    pub fn available_bytes(&self) -> usize {
        self.units.available() as usize
    }

    /// A reservation of nothing, to grow later.
    pub fn empty(&self) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Waits until `bytes` are free and holds them.
    pub async fn reserve(&self, bytes: usize) -> Reservation {
        let mut reservation = self.empty();
        reservation.grow(bytes).await;
        reservation
    }

    /// Holds `bytes` if they are free now.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        let mut reservation = self.empty();
        reservation.try_grow(bytes).then_some(reservation)
    }
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes as usize
    }

    /// Waits until `bytes` more are free and adds them.
    pub async fn grow(&mut self, bytes: usize) {
        assert!(
            bytes as u64 <= self.budget.total_bytes,
            "a reservation larger than its budget would wait forever"
        );
        if bytes == 0 {
            return;
        }
        // A budget is never closed, so the wait ends with the units.
        if self.budget.units.acquire(bytes as u64).await.is_ok() {
            self.bytes += bytes as u64;
        }
    }

    /// Adds `bytes` if they are free now.
    pub fn try_grow(&mut self, bytes: usize) -> bool {
        let taken = matches!(self.budget.units.try_acquire(bytes as u64), Ok(true));
        if taken {
            self.bytes += bytes as u64;
        }
        taken
    }

    /// Moves `bytes` of this reservation into a new one (a frame taken out of a connection's
    /// read buffer keeps the units that covered it).
    pub fn split_off(&mut self, bytes: usize) -> Reservation {
        let bytes = (bytes as u64).min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Gives back everything above `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = (bytes as u64).min(self.bytes);
        let excess = self.bytes - keep;
        if excess > 0 {
            self.bytes = keep;
            self.budget.units.signal(excess);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_grow_shrink_and_give_back_on_drop() {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 16)
            .make()
            .expect("executor")
            .run(async {
                let budget = Budget::new(100);
                let mut first = budget.reserve(60).await;
                assert_eq!(budget.available_bytes(), 40);
                assert!(budget.try_reserve(50).is_none());
                assert!(!first.try_grow(41));
                assert!(first.try_grow(40));
                assert_eq!((first.bytes(), budget.available_bytes()), (100, 0));
                let waiter = {
                    let budget = budget.clone();
                    glommio::spawn_local(async move { budget.reserve(30).await.bytes() })
                };
                glommio::yield_if_needed().await;
                first.shrink_to(70);
                assert_eq!(waiter.await, 30);
                let frame = first.split_off(50);
                assert_eq!((first.bytes(), frame.bytes()), (20, 50));
                drop(first);
                assert_eq!(budget.available_bytes(), 50);
                drop(frame);
                assert_eq!(budget.available_bytes(), 100);
            });
    }
}
