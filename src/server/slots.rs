//! The connection slots: `server.max_connections` ordinary ones, and
//! `server.reserved_connections` more that serve only probes and scrapes,
//! so a liveness probe gets through while streams hold every ordinary slot.
//! At the cap a new connection is not dropped blind: the connection idle
//! the longest (waiting for a request head, nothing in flight) gives up its
//! slot, those that were never answered with success first, so clients
//! that never sent a head or never authenticated go before a kept-alive
//! Prometheus connection.
//!
//! Owns: the table of open connections (idle since when, answered yet),
//! the choice of whom to evict, the two semaphores. Depends on nothing
//! outside tokio.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Which slots a connection holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    Ordinary,
    /// Beyond `server.max_connections`: probes and scrapes only.
    Reserve,
}

/// Every slot of the server.
pub struct Slots {
    ordinary: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    sizes: (usize, usize),
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    /// Requests whose answer is not sent whole yet.
    in_flight: u32,
    /// Since accept, or since the end of the last answer.
    idle_since: Instant,
    /// Some answer on this connection was a success (below 400).
    answered: bool,
    pool: Pool,
    evict: CancellationToken,
    /// Held here, not by the connection's task: an eviction hands it to
    /// the new connection at once, while the evicted one closes.
    permit: OwnedSemaphorePermit,
}

/// What the accept loop does with a new connection.
pub enum Admission {
    Free(Ticket),
    /// The slot of an idle connection, which was told to close.
    Evicted(Ticket),
    /// Every slot is busy answering: close it.
    Full,
}

/// A connection's hold on its slot; dropping it frees the slot.
pub struct Ticket {
    lease: Lease,
    evict: CancellationToken,
}

/// What a connection's requests report to the table. Cheap to clone.
#[derive(Clone)]
pub struct Lease {
    slots: Arc<Slots>,
    id: u64,
    pool: Pool,
}

/// A request in flight; dropped when its answer has been sent whole.
pub struct InFlight {
    lease: Lease,
}

impl Slots {
    pub fn new(ordinary: usize, reserve: usize) -> Arc<Self> {
        let ordinary = ordinary.max(1);
        Arc::new(Self {
            ordinary: Arc::new(Semaphore::new(ordinary)),
            reserve: Arc::new(Semaphore::new(reserve)),
            sizes: (ordinary, reserve),
            table: Mutex::new(Table::default()),
        })
    }

    /// A free ordinary slot, else the slot of the connection idle the
    /// longest, else a free reserve slot.
    pub fn admit(self: &Arc<Self>) -> Admission {
        if let Ok(permit) = self.ordinary.clone().try_acquire_owned() {
            return Admission::Free(self.ticket(Pool::Ordinary, permit));
        }
        if let Some((pool, permit)) = self.evict_idlest() {
            return Admission::Evicted(self.ticket(pool, permit));
        }
        match self.reserve.clone().try_acquire_owned() {
            Ok(permit) => Admission::Free(self.ticket(Pool::Reserve, permit)),
            Err(_) => Admission::Full,
        }
    }

    /// Waits until every connection holding a slot has closed (an evicted
    /// one holds none: it is closing already).
    pub async fn all_closed(&self) {
        let (ordinary, reserve) = self.sizes;
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let _ = self.ordinary.acquire_many(count(ordinary)).await;
        if reserve > 0 {
            let _ = self.reserve.acquire_many(count(reserve)).await;
        }
    }

    fn ticket(self: &Arc<Self>, pool: Pool, permit: OwnedSemaphorePermit) -> Ticket {
        let evict = CancellationToken::new();
        let mut table = self.table.lock();
        let id = table.next_id;
        table.next_id = table.next_id.wrapping_add(1);
        table.open.insert(
            id,
            Entry {
                in_flight: 0,
                idle_since: Instant::now(),
                answered: false,
                pool,
                evict: evict.clone(),
                permit,
            },
        );
        Ticket { lease: Lease { slots: self.clone(), id, pool }, evict }
    }

    /// Tells the idlest connection to close and takes its slot; `None`
    /// when every connection has a request in flight.
    fn evict_idlest(&self) -> Option<(Pool, OwnedSemaphorePermit)> {
        let mut table = self.table.lock();
        let id = table
            .open
            .iter()
            .filter(|(_, entry)| entry.in_flight == 0)
            .min_by_key(|(_, entry)| (entry.answered, entry.idle_since))
            .map(|(id, _)| *id)?;
        let victim = table.open.remove(&id)?;
        victim.evict.cancel();
        Some((victim.pool, victim.permit))
    }
}

impl Ticket {
    pub fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// Resolves when a newer connection takes this one's slot.
    pub async fn evicted(&self) {
        self.evict.cancelled().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.lease.slots.table.lock().open.remove(&self.lease.id);
    }
}

impl Lease {
    /// On a reserve slot: only probes and scrapes are served.
    pub fn restricted(&self) -> bool {
        self.pool == Pool::Reserve
    }

    /// A request head arrived: not idle until its answer is sent.
    pub fn begin(&self) -> InFlight {
        if let Some(entry) = self.slots.table.lock().open.get_mut(&self.id) {
            entry.in_flight = entry.in_flight.saturating_add(1);
        }
        InFlight { lease: self.clone() }
    }
}

impl InFlight {
    /// The answer's status: a success makes the connection one to keep.
    pub fn answered(&self, success: bool) {
        if !success {
            return;
        }
        if let Some(entry) = self.lease.slots.table.lock().open.get_mut(&self.lease.id) {
            entry.answered = true;
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(entry) = self.lease.slots.table.lock().open.get_mut(&self.lease.id) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if entry.in_flight == 0 {
                entry.idle_since = Instant::now();
            }
        }
    }
}
