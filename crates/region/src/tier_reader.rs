//! The tier reader: a zpage thread that reads pages back from a tier whose
//! reads are not async-signal-safe (a Redis tier: its client allocates,
//! locks and waits on the network), for faults that cannot.
//!
//! **Async-signal-safety argument.** [`TierReader::read`] runs in the
//! faulting thread's SIGBUS handler (or an API call that blocks asynchronous
//! signals). It claims a preallocated request slot by compare-and-swap,
//! fills it with plain atomic stores (the reference, the page, the address
//! and length of the caller's preallocated buffer), bumps the reader's futex
//! word and wakes it (`futex`), then sleeps on the slot's state word
//! (`futex`, with a timeout so it rechecks) until the reader says it is done,
//! and reads the outcome. It allocates nothing, takes no lock and makes only
//! `futex`, `sched_yield` and `clock_gettime` system calls. It never waits
//! for its own thread: the reader is a thread of its own that blocks every
//! asynchronous signal (for a fault of its own on region memory, see the
//! end of `fault.rs`'s argument), and the tier's
//! locks it may wait on are taken only by zpage's threads (the reclaimer's
//! writebacks and frees, this reader) and by API calls that block
//! asynchronous signals ([`crate::Budget::store_stats`]); so no handler can
//! be interrupting a thread that holds what the reader needs.
//!
//! The read is bounded by the tier's own timeouts (the Redis tier's connect
//! and response timeouts). Should the reader not answer within
//! [`GIVE_UP_NS`] (a tier without timeouts, a stuck reader) the handler
//! reports the page unavailable, and the fault path ends the process naming
//! it: the buffer may still be written later, but nothing reads it again.
#![allow(unsafe_code)]

use crate::sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use zpage_store::{ReadFailure, Tier, TierRef};

const FREE: u32 = 0;
const FILLING: u32 = 1;
const PENDING: u32 = 2;
const DONE: u32 = 3;

/// How long a handler waits for the reader before it gives the page up.
pub const GIVE_UP_NS: u64 = 30_000_000_000;

struct Request {
    state: AtomicU32,
    tier_ref: AtomicU64,
    page: AtomicU64,
    buf: AtomicPtr<u8>,
    len: AtomicUsize,
    /// Written by the reader before it publishes DONE, read by the handler
    /// after it sees DONE.
    outcome: UnsafeCell<Result<usize, ReadFailure>>,
}

/// Request slots shared by the faulting threads and the reader thread.
pub struct TierReader {
    tier: Arc<dyn Tier>,
    requests: Box<[Request]>,
    /// Bumped for every request; the reader sleeps on it.
    kick: AtomicU32,
    stop: AtomicBool,
}

// SAFETY: a request's `outcome` is written only by the reader while the
// slot is PENDING (the handler does not touch it then) and read only by the
// handler that owns the slot once it is DONE (the reader does not touch it
// then); the state word's release/acquire orders the two.
unsafe impl Sync for TierReader {}
// SAFETY: plain owned data and an `Arc` of a `Send + Sync` tier.
unsafe impl Send for TierReader {}

impl std::fmt::Debug for TierReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TierReader({}, {} slots)",
            self.tier.describe(),
            self.requests.len()
        )
    }
}

impl TierReader {
    /// A reader for `tier` with `slots` request slots (one per fault that
    /// may be in flight: the budget's decompression workers).
    pub fn new(tier: Arc<dyn Tier>, slots: usize) -> TierReader {
        TierReader {
            tier,
            requests: (0..slots.max(1))
                .map(|_| Request {
                    state: AtomicU32::new(FREE),
                    tier_ref: AtomicU64::new(0),
                    page: AtomicU64::new(0),
                    buf: AtomicPtr::new(std::ptr::null_mut()),
                    len: AtomicUsize::new(0),
                    outcome: UnsafeCell::new(Err(ReadFailure::Unavailable)),
                })
                .collect(),
            kick: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Has the reader thread read `tier_ref` (page `page`) into `buf` and
    /// returns what [`Tier::get`] returned. Async-signal-safe (see the module
    /// docs); blocks until the reader is done.
    pub fn read(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure> {
        let request = loop {
            if let Some(r) = self.requests.iter().find(|r| {
                r.state
                    .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            }) {
                break r;
            }
            // Every slot in use: as many faults in flight as workers, which
            // cannot be (the caller holds a worker); yield and look again.
            sys::yield_now();
        };
        request.tier_ref.store(tier_ref.to_raw(), Ordering::Relaxed);
        request.page.store(page, Ordering::Relaxed);
        request.buf.store(buf.as_mut_ptr(), Ordering::Relaxed);
        request.len.store(buf.len(), Ordering::Relaxed);
        request.state.store(PENDING, Ordering::Release);
        self.kick.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.kick);
        let started = sys::now_ns();
        loop {
            match request.state.load(Ordering::Acquire) {
                DONE => break,
                _ if sys::now_ns() - started > GIVE_UP_NS => {
                    // The slot stays PENDING forever: the process is about to
                    // end naming the page, and the reader may still write.
                    return Err(ReadFailure::Unavailable);
                }
                state => sys::futex_wait(&request.state, state, 100_000_000),
            }
        }
        // SAFETY: DONE was published with release after the reader's last
        // write to `outcome` and to `buf`; the slot is ours until we free it.
        let outcome = unsafe { *request.outcome.get() };
        request.state.store(FREE, Ordering::Release);
        outcome
    }

    /// The reader thread's loop: serves pending requests until [`TierReader::stop`].
    pub fn run(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let seen = self.kick.load(Ordering::SeqCst);
            let mut served = false;
            for request in self.requests.iter() {
                if request.state.load(Ordering::Acquire) != PENDING {
                    continue;
                }
                let page = request.page.load(Ordering::Relaxed);
                let outcome = match TierRef::from_raw(request.tier_ref.load(Ordering::Relaxed)) {
                    Some(tier_ref) => {
                        // SAFETY: the requester published the buffer (its
                        // worker's preallocated tier buffer) before PENDING
                        // and does not touch it until it sees DONE; it is
                        // valid for `len` bytes for that whole time.
                        let buf = unsafe {
                            std::slice::from_raw_parts_mut(
                                request.buf.load(Ordering::Relaxed),
                                request.len.load(Ordering::Relaxed),
                            )
                        };
                        self.tier.get(tier_ref, page, buf)
                    }
                    None => Err(ReadFailure::Stale),
                };
                // SAFETY: the slot is PENDING: only this thread touches
                // `outcome` until it publishes DONE below.
                unsafe { *request.outcome.get() = outcome };
                request.state.store(DONE, Ordering::Release);
                sys::futex_wake(&request.state);
                served = true;
            }
            if !served {
                sys::futex_wait(&self.kick, seen, 100_000_000);
            }
        }
    }

    /// Ends [`TierReader::run`] (the budget is going away).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.kick);
    }
}
