//! How the fault path and a budget's reclaimer wake each other
//! ([`ReclaimSignal`]): the kick that wakes the reclaimer, the room that
//! wakes throttled faults, the burst faults wait out, and the stop.
//!
//! Two handshakes here are Dekker pairs, each side storing its own word and
//! then loading the other's; both keep every access sequentially consistent,
//! or each side could miss the other's store and a wakeup would be lost:
//!
//! - **kick / idle**: a kick bumps the counter, then wakes the reclaimer if
//!   it is idle; the reclaimer sets idle, then sleeps on the counter only
//!   while it still holds the value it last saw (the futex compares it). So
//!   a kick either sees the reclaimer idle and wakes it, or bumped the
//!   counter before the futex looked, which then returns at once.
//! - **room / waiters**: a throttled fault counts itself a waiter, then
//!   looks at the budget (the resident count, through
//!   `Resident::pages_for_room`); the reclaimer lowers the resident count,
//!   then looks at the waiters and wakes them (bumping `room` first, so a
//!   waiter about to sleep on the old value returns at once).
//!
//! Every call here is async-signal-safe: atomics and futexes only.

use crate::sys;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The wakeups between one budget's fault path and its reclaimer.
#[derive(Debug, Default)]
pub struct ReclaimSignal {
    /// Bumped by every kick: the reclaimer sleeps on it.
    kick: AtomicU32,
    /// The reclaimer is (about to be) asleep on `kick`.
    idle: AtomicBool,
    /// Bumped when the reclaimer made room under the budget: throttled
    /// faults sleep on it.
    room: AtomicU32,
    /// Faults sleeping on `room`.
    room_waiters: AtomicU32,
    /// The reclaimer is moving a burst of pages out: faults wait until it
    /// is done, so that no MOVE of the burst interrupts their CPUs.
    bursting: AtomicBool,
    /// The budget is going away: its threads end.
    stop: AtomicBool,
    /// Pages cannot leave now (the pool is at its cap with nowhere to
    /// write back, or every resident page is pinned or held): faults go
    /// over the budget instead of waiting for room that will not come.
    stuck: AtomicBool,
    /// The most pages resident over the budget while stuck.
    overshoot_peak: std::sync::atomic::AtomicUsize,
}

impl ReclaimSignal {
    // ---- The kick (any thread) and the reclaimer's sleep ----

    /// Wakes the reclaimer. The futex system call is made only when it
    /// sleeps: the counter bump alone makes its next sleep return at once,
    /// so a busy reclaimer costs the caller no system call.
    pub fn kick(&self) {
        self.kick.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) {
            sys::futex_wake(&self.kick);
        }
    }

    /// Tells the reclaimer the program faults (its next sleep returns at
    /// once), without waking it now.
    pub fn note_activity(&self) {
        self.kick.fetch_add(1, Ordering::SeqCst);
    }

    /// Wakes the reclaimer whether it looks idle or not (the budget stops).
    pub fn wake(&self) {
        sys::futex_wake(&self.kick);
    }

    /// The kick counter (the reclaimer's look, before it decides to sleep).
    pub fn kicks(&self) -> u32 {
        self.kick.load(Ordering::Acquire)
    }

    /// The reclaimer sleeps until kicked, or for `timeout_ns`, unless the
    /// counter moved past `seen` already (see the module docs).
    pub fn sleep(&self, seen: u32, timeout_ns: u64) {
        self.idle.store(true, Ordering::SeqCst);
        sys::futex_wait(&self.kick, seen, timeout_ns);
        self.idle.store(false, Ordering::SeqCst);
    }

    // ---- Room under the budget ----

    /// A fault over the limit: sleeps until `full()` turns false, the
    /// budget stops, or `timeout_ns` have passed since `started`
    /// (`sys::now_ns`), kicking the reclaimer (`kick`) before each sleep.
    pub fn wait_for_room(
        &self,
        started: u64,
        timeout_ns: u64,
        full: &dyn Fn() -> bool,
        kick: &dyn Fn(),
    ) {
        self.room_waiters.fetch_add(1, Ordering::SeqCst);
        while full()
            && !self.stop.load(Ordering::Relaxed)
            && !self.stuck()
            && sys::now_ns() - started < timeout_ns
        {
            let seq = self.room.load(Ordering::SeqCst);
            if !full() {
                break;
            }
            kick();
            sys::futex_wait(&self.room, seq, 1_000_000);
        }
        self.room_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// The reclaimer's side: wakes the throttled faults if `has_room()`.
    pub fn announce_room(&self, has_room: impl FnOnce() -> bool) {
        if self.room_waiters.load(Ordering::SeqCst) != 0 && has_room() {
            self.room.fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(&self.room);
        }
    }

    /// Whether faults wait for room (the reclaimer's choice of work).
    pub fn faults_waiting(&self) -> bool {
        self.room_waiters.load(Ordering::Acquire) != 0
    }

    // ---- Bursts ----

    /// The reclaimer starts moving a burst of pages out: faults wait.
    pub fn begin_burst(&self) {
        self.bursting.store(true, Ordering::SeqCst);
    }

    pub fn end_burst(&self) {
        self.bursting.store(false, Ordering::SeqCst);
    }

    pub fn bursting(&self) -> bool {
        self.bursting.load(Ordering::SeqCst)
    }

    // ---- Pages that cannot leave ----

    /// The reclaimer's finding: pages can leave again (`false`), or cannot
    /// (`true`: throttled faults are woken and go over the budget).
    pub fn set_stuck(&self, stuck: bool) {
        if self.stuck.swap(stuck, Ordering::SeqCst) != stuck && stuck {
            self.room.fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(&self.room);
        }
    }

    pub fn stuck(&self) -> bool {
        self.stuck.load(Ordering::SeqCst)
    }

    /// A fault goes `over` pages past the budget while stuck.
    pub fn note_overshoot(&self, over: usize) {
        self.overshoot_peak.fetch_max(over, Ordering::Relaxed);
    }

    /// The most pages resident past the budget while stuck.
    pub fn overshoot_peak(&self) -> usize {
        self.overshoot_peak.load(Ordering::Relaxed)
    }

    // ---- Stop ----

    /// The budget is going away: the reclaimer and the event thread end.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}
