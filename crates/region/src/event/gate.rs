//! The install/event protocol between the threads that install pages in a
//! budget's regions and its event thread ([`InstallGate`]; the protocol as
//! a whole is described in `event.rs`).
//!
//! `installs` and `event_seq` form a Dekker pair, so every access to them is
//! sequentially consistent: an install counts itself in and then looks at
//! the sequence; the event thread makes the sequence odd and then waits for
//! the installs to reach zero. Either the install sees the sequence odd and
//! backs off, or the event thread sees it in flight and waits: no page is
//! installed from a stale copy after a program-side `MADV_DONTNEED` has been
//! acknowledged and before its pages are marked discarded.
//!
//! Async-signal-safe: atomics and `sched_yield` only. An installer waits
//! for the event thread, which waits only for installs in flight; a thread
//! with none in flight never waits on itself here.

use crate::sys::{self, Errno};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One budget's side of the install/event protocol.
#[derive(Debug, Default)]
pub struct InstallGate {
    /// Installs (COPY / ZEROPAGE / MOVE into a region, and the poison
    /// marker) and evictions' MOVEs out of a region in flight.
    installs: AtomicUsize,
    /// Odd while the event thread is reading and applying events.
    event_seq: AtomicU64,
    /// When the event thread last read a `REMOVE` event (`sys::now_ns`):
    /// until some time after, a zap it announced may still be on its way
    /// (see `evict::ZAP_SETTLE_NS`). Stored before the event's pages are
    /// marked and loaded after a mark is seen, both sequentially
    /// consistent, so an evictor that sees a mark sees this time too.
    last_remove_ns: AtomicU64,
}

impl InstallGate {
    /// Runs one install ioctl under the protocol, retrying `EAGAIN` (events
    /// pending) after letting the event thread through.
    pub fn install(&self, mut f: impl FnMut() -> Result<(), Errno>) -> Result<(), Errno> {
        loop {
            self.installs.fetch_add(1, Ordering::SeqCst);
            if self.event_seq.load(Ordering::SeqCst) & 1 == 1 {
                self.installs.fetch_sub(1, Ordering::SeqCst);
                self.wait_events_applied();
                continue;
            }
            let r = f();
            self.installs.fetch_sub(1, Ordering::SeqCst);
            match r {
                Err(Errno(libc::EAGAIN)) => sys::yield_now(),
                r => return r,
            }
        }
    }

    /// Waits until the events the event thread read are applied.
    pub fn wait_events_applied(&self) {
        while self.event_seq.load(Ordering::SeqCst) & 1 == 1 {
            sys::yield_now();
        }
    }

    // ---- The event thread ----

    /// Step 1: no install starts from here, and none is in flight on return.
    pub fn begin_events(&self) {
        self.event_seq.fetch_add(1, Ordering::SeqCst);
        while self.installs.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    /// Step 3: the events read are applied; installs resume.
    pub fn end_events(&self) {
        self.event_seq.fetch_add(1, Ordering::SeqCst);
    }

    /// A `REMOVE` event was read now (before its pages are marked).
    pub fn remove_read(&self) {
        self.last_remove_ns.store(sys::now_ns(), Ordering::SeqCst);
    }

    /// Nanoseconds since the event thread last read a `REMOVE` event.
    pub fn ns_since_remove(&self) -> u64 {
        sys::now_ns().saturating_sub(self.last_remove_ns.load(Ordering::SeqCst))
    }

    // ---- A forked child ----

    /// In a forked child (one thread): clears what the parent's threads had
    /// in flight at the fork. Returns whether the parent's event thread was
    /// between reading events and marking their pages (the child's page
    /// table then tells what its marks would have said).
    pub fn take_over_in_child(&self) -> bool {
        let events_in_flight = self.event_seq.load(Ordering::SeqCst) & 1 == 1;
        if events_in_flight {
            self.event_seq.fetch_add(1, Ordering::SeqCst);
        }
        self.installs.store(0, Ordering::SeqCst);
        events_in_flight
    }
}
