//! The in-flight table: per-queue capacity counters and per-attempt slots in shared memory.
//!
//! The supervisor's dispatcher sizes each claim by the free capacity of its queue
//! ([`InFlight::reserve`]); every running attempt occupies a slot (job id, run lease, queue,
//! worker, cancel flag) that the heartbeat, the rescuer and the cancel path read from any
//! process. Everything is lock-free: a worker SIGKILLed mid-call can leave at most one slot in
//! a transient state, which [`InFlight::release_worker`] reclaims.
//!
//! # Capacity accounting
//! Capacity units are taken with `reserve` (before claiming jobs) and an *occupied slot holds
//! one unit of its queue*: `release_slot` and `release_worker` give the unit back. Units
//! reserved for jobs that were not claimed are returned with `release`.
//!
//! A queue's in-flight word is `tag (40 bits) | count (24 bits)`: giving a slot's unit back
//! decrements the count and records the slot and generation in the tag in one CAS. Freeing a
//! slot takes three steps (OCCUPIED -> RELEASING, unit back, -> FREE), so a worker killed
//! between any two leaves a RELEASING slot, and `release_worker` tells from the tag whether its
//! unit already went back (each queue index belongs to one worker, and only slot releases
//! write the tag).
//!
//! # Slot state word
//! `gen (24 bits) | worker (32 bits) | flags (8 bits)`, flags = phase (FREE, CLAIMING,
//! OCCUPIED, RELEASING) plus the CANCELLED bit. The generation changes on every acquisition, so a CAS
//! against a state read earlier fails if the slot was released and reused in between: cancel
//! can never flag the *next* job of a slot, and readers detect torn snapshots (seqlock style:
//! read state, read fields, re-read state). The worker index sits in the state word so that a
//! slot left CLAIMING by a dead worker is still attributed to it.

use std::fmt;
use std::io;
use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::shm::{SharedMap, CACHE_LINE};

const PHASE_MASK: u64 = 0b11;
const FREE: u64 = 0;
const CLAIMING: u64 = 1;
const OCCUPIED: u64 = 2;
const RELEASING: u64 = 3;
const CANCELLED: u64 = 0b100;
const STARTED: u64 = 0b1000;
// Bits a slot's owner may set while it stays occupied; they change no field.
const FLAGS: u64 = CANCELLED | STARTED;
const WORKER_SHIFT: u32 = 8;
const GEN_SHIFT: u32 = 40;

const OFF_HINT: usize = 0;
const OFF_QUEUES: usize = CACHE_LINE;
// Each queue and each slot has its own cache line: they are written by different processes.
const QUEUE_BYTES: usize = CACHE_LINE;
const SLOT_BYTES: usize = CACHE_LINE;
const Q_CAPACITY: usize = 0;
const Q_IN_FLIGHT: usize = 8;
const S_STATE: usize = 0;
const S_JOB_ID: usize = 8;
const S_RUN_LEASE: usize = 16;
const S_QUEUE: usize = 24;

// In-flight word: the count in the low bits, the last slot release's tag above it.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TAG_GEN_BITS: u32 = 18;

/// Largest capacity of one queue index (the in-flight count has 24 bits).
pub const MAX_CAPACITY: i64 = (1 << (COUNT_BITS - 1)) - 1;

/// Largest number of queues / slots accepted.
pub const MAX_QUEUES: usize = 1 << 16;
pub const MAX_SLOTS: usize = 1 << 22;

/// Why an in-flight operation failed.
#[derive(Debug)]
pub enum InFlightError {
    /// An argument is out of range: (argument name, explanation).
    InvalidArg(&'static str, String),
    /// A queue or slot index is out of range: (what, index, count).
    Index(&'static str, i64, usize),
    /// More units released than are in flight.
    OverRelease {
        queue: usize,
        n: i64,
        in_flight: i64,
    },
    /// Every slot is occupied.
    Full,
    /// The shared mapping could not be created.
    Os(io::Error),
}

impl fmt::Display for InFlightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InFlightError::InvalidArg(name, why) => write!(f, "{name}: {why}"),
            InFlightError::Index(what, i, n) => {
                write!(f, "{what} index {i} out of range ({n} {what}s)")
            }
            InFlightError::OverRelease {
                queue,
                n,
                in_flight,
            } => write!(
                f,
                "release of {n} unit(s) on queue {queue} exceeds its {in_flight} in flight"
            ),
            InFlightError::Full => write!(f, "in-flight table full"),
            InFlightError::Os(e) => write!(f, "shared memory: {e}"),
        }
    }
}

impl std::error::Error for InFlightError {}

/// A consistent snapshot of an occupied slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    pub job_id: i64,
    pub run_lease: i64,
    pub queue: u32,
    pub worker: u32,
    pub cancelled: bool,
    /// Its handler has started: a worker that dies now has spent the attempt.
    pub started: bool,
}

/// See the module docs.
pub struct InFlight {
    map: SharedMap,
    queues: usize,
    slots: usize,
}

#[inline]
fn phase(state: u64) -> u64 {
    state & PHASE_MASK
}

#[inline]
fn worker_of(state: u64) -> u32 {
    (state >> WORKER_SHIFT) as u32
}

#[inline]
fn with(gen: u64, worker: u32, flags: u64) -> u64 {
    ((gen & 0xff_ffff) << GEN_SHIFT) | ((worker as u64) << WORKER_SHIFT) | flags
}

#[inline]
fn gen_of(state: u64) -> u64 {
    state >> GEN_SHIFT
}

#[inline]
fn count_of(word: u64) -> i64 {
    (word & COUNT_MASK) as i64
}

/// The tag a release of `slot` at generation `gen` leaves in its queue's in-flight word.
#[inline]
fn release_tag(slot: usize, gen: u64) -> u64 {
    ((slot as u64) << TAG_GEN_BITS | (gen & ((1 << TAG_GEN_BITS) - 1))) << COUNT_BITS
}

impl InFlight {
    /// Maps a table for `capacities.len()` queues and `slots` attempt slots.
    pub fn new(capacities: &[i64], slots: usize) -> Result<Self, InFlightError> {
        if capacities.is_empty() || capacities.len() > MAX_QUEUES {
            return Err(InFlightError::InvalidArg(
                "capacities",
                format!(
                    "needs between 1 and {MAX_QUEUES} queues, got {}",
                    capacities.len()
                ),
            ));
        }
        if let Some(c) = capacities
            .iter()
            .find(|&&c| !(0..=MAX_CAPACITY).contains(&c))
        {
            return Err(InFlightError::InvalidArg(
                "capacities",
                format!("capacities must be between 0 and {MAX_CAPACITY}, got {c}"),
            ));
        }
        if slots == 0 || slots > MAX_SLOTS {
            return Err(InFlightError::InvalidArg(
                "slots",
                format!("must be between 1 and {MAX_SLOTS}, got {slots}"),
            ));
        }
        let len = OFF_QUEUES + capacities.len() * QUEUE_BYTES + slots * SLOT_BYTES;
        let map = SharedMap::new(len).map_err(InFlightError::Os)?;
        let table = Self {
            map,
            queues: capacities.len(),
            slots,
        };
        for (q, &c) in capacities.iter().enumerate() {
            table.capacity_word(q).store(c, Ordering::Relaxed);
        }
        Ok(table)
    }

    pub fn queue_count(&self) -> usize {
        self.queues
    }

    pub fn slot_count(&self) -> usize {
        self.slots
    }

    /// Checks a queue index from Python.
    pub fn queue_index(&self, queue: i64) -> Result<usize, InFlightError> {
        usize::try_from(queue)
            .ok()
            .filter(|&q| q < self.queues)
            .ok_or(InFlightError::Index("queue", queue, self.queues))
    }

    /// Checks a slot index from Python.
    pub fn slot_index(&self, slot: i64) -> Result<usize, InFlightError> {
        usize::try_from(slot)
            .ok()
            .filter(|&s| s < self.slots)
            .ok_or(InFlightError::Index("slot", slot, self.slots))
    }

    // ------------------------------------------------------------ capacity counters

    /// Takes up to `want` free units of `queue`; returns how many were granted.
    ///
    /// CAS loop so that concurrent reservers never push `in_flight` above `capacity`.
    pub fn reserve(&self, queue: usize, want: i64) -> i64 {
        if want <= 0 {
            return 0;
        }
        let cap = self.capacity_word(queue);
        let inf = self.in_flight_word(queue);
        let mut cur = inf.load(Ordering::Relaxed);
        loop {
            let free = (cap.load(Ordering::Relaxed) - count_of(cur)).max(0);
            let grant = want.min(free);
            if grant == 0 {
                return 0;
            }
            // The count stays below capacity, so adding never carries into the tag.
            match inf.compare_exchange_weak(
                cur,
                cur + grant as u64,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => cur = now,
            }
        }
    }

    /// Returns `n` units of `queue`; refuses to go below zero (a double release is a bug).
    pub fn release(&self, queue: usize, n: i64) -> Result<(), InFlightError> {
        if n < 0 {
            return Err(InFlightError::InvalidArg(
                "n",
                format!("must be >= 0, got {n}"),
            ));
        }
        let inf = self.in_flight_word(queue);
        let mut cur = inf.load(Ordering::Relaxed);
        loop {
            if count_of(cur) < n {
                return Err(InFlightError::OverRelease {
                    queue,
                    n,
                    in_flight: count_of(cur),
                });
            }
            match inf.compare_exchange_weak(
                cur,
                cur - n as u64,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Gives back the unit of a slot release tagged `tag`, saturating at zero (cleanup paths
    /// must not fail), and records the tag in the same CAS.
    fn return_unit(&self, queue: usize, tag: u64) {
        if queue >= self.queues {
            return;
        }
        let _ = self
            .in_flight_word(queue)
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |w| {
                Some(tag | (w & COUNT_MASK).saturating_sub(1))
            });
    }

    /// Whether the in-flight word of `queue` records the release tagged `tag` as its last.
    fn unit_returned(&self, queue: usize, tag: u64) -> bool {
        queue < self.queues
            && self.in_flight_word(queue).load(Ordering::Acquire) & !COUNT_MASK == tag
    }

    pub fn in_flight(&self, queue: usize) -> i64 {
        count_of(self.in_flight_word(queue).load(Ordering::Relaxed))
    }

    /// Units in flight over every queue: zero means no attempt is running or claimed
    /// anywhere in the table, so no outcome is on its way.
    pub fn total_in_flight(&self) -> i64 {
        (0..self.queues).map(|q| self.in_flight(q)).sum()
    }

    pub fn capacity(&self, queue: usize) -> i64 {
        self.capacity_word(queue).load(Ordering::Relaxed)
    }

    /// `capacity - in_flight`, never negative (capacity may be lowered below in-flight).
    pub fn free(&self, queue: usize) -> i64 {
        (self.capacity(queue) - self.in_flight(queue)).max(0)
    }

    pub fn set_capacity(&self, queue: usize, cap: i64) -> Result<(), InFlightError> {
        if !(0..=MAX_CAPACITY).contains(&cap) {
            return Err(InFlightError::InvalidArg(
                "cap",
                format!("must be between 0 and {MAX_CAPACITY}, got {cap}"),
            ));
        }
        self.capacity_word(queue).store(cap, Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------ attempt slots

    /// Occupies a free slot for an attempt; scans from a rotating hint so that concurrent
    /// acquirers start at different slots.
    pub fn acquire_slot(
        &self,
        job_id: i64,
        run_lease: i64,
        queue: usize,
        worker: u32,
    ) -> Result<usize, InFlightError> {
        let start = self.hint().fetch_add(1, Ordering::Relaxed) as usize;
        for i in 0..self.slots {
            let idx = (start + i) % self.slots;
            let state = self.state(idx);
            let s = state.load(Ordering::Relaxed);
            if phase(s) != FREE {
                continue;
            }
            let gen = gen_of(s) + 1;
            // Acquire: pairs with the Release of the previous owner's release, so its field
            // reads are done before we overwrite.
            if state
                .compare_exchange(
                    s,
                    with(gen, worker, CLAIMING),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            // Release fence (seqlock writer): a reader whose field load sees a store below
            // also sees CLAIMING when it re-reads the state, and drops its snapshot.
            fence(Ordering::Release);
            self.s_i64(idx, S_JOB_ID).store(job_id, Ordering::Relaxed);
            self.s_i64(idx, S_RUN_LEASE)
                .store(run_lease, Ordering::Relaxed);
            self.s_u32(idx, S_QUEUE)
                .store(queue as u32, Ordering::Relaxed);
            // Release: publishes the fields to readers that Acquire an OCCUPIED state.
            state.store(with(gen, worker, OCCUPIED), Ordering::Release);
            return Ok(idx);
        }
        Err(InFlightError::Full)
    }

    /// Frees an occupied slot and returns its queue unit; false if it was not occupied.
    pub fn release_slot(&self, slot: usize) -> bool {
        self.take_slot(slot, |_| true).is_some()
    }

    /// Frees `slot` if occupied and `pred(state)` holds, returning its snapshot.
    fn take_slot(&self, slot: usize, pred: impl Fn(u64) -> bool) -> Option<SlotInfo> {
        let (releasing, info) = self.begin_release(slot, pred)?;
        self.return_unit(info.queue as usize, release_tag(slot, gen_of(releasing)));
        self.finish_release(slot, releasing);
        Some(info)
    }

    /// Moves `slot` from OCCUPIED to RELEASING if `pred(state)` holds: the first step of a
    /// release. Returns the RELEASING state word and the slot's snapshot.
    fn begin_release(&self, slot: usize, pred: impl Fn(u64) -> bool) -> Option<(u64, SlotInfo)> {
        let state = self.state(slot);
        loop {
            let (s, info) = self.snapshot(slot)?;
            if !pred(s) {
                return None;
            }
            let releasing = with(gen_of(s), worker_of(s), RELEASING);
            if state
                .compare_exchange(s, releasing, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some((releasing, info));
            }
            // Lost a race (cancel bit set, or the slot was released): look again.
        }
    }

    /// Frees a RELEASING slot whose unit went back.
    fn finish_release(&self, slot: usize, releasing: u64) {
        // Release: our field reads happen-before the next owner's writes (its claim is
        // Acquire). A CAS: only one of the worker and `release_worker` frees it.
        let _ = self.state(slot).compare_exchange(
            releasing,
            with(gen_of(releasing), 0, FREE),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// A consistent view of `slot` and the state word it was read under, if occupied.
    fn snapshot(&self, slot: usize) -> Option<(u64, SlotInfo)> {
        let state = self.state(slot);
        loop {
            let s = state.load(Ordering::Acquire);
            if phase(s) != OCCUPIED {
                return None;
            }
            let info = SlotInfo {
                job_id: self.s_i64(slot, S_JOB_ID).load(Ordering::Relaxed),
                run_lease: self.s_i64(slot, S_RUN_LEASE).load(Ordering::Relaxed),
                queue: self.s_u32(slot, S_QUEUE).load(Ordering::Relaxed),
                worker: worker_of(s),
                cancelled: s & CANCELLED != 0,
                started: s & STARTED != 0,
            };
            // Seqlock check: the fields belong to state `s` if the generation is unchanged
            // (only a flag may have been set meanwhile).
            fence(Ordering::Acquire);
            let again = state.load(Ordering::Relaxed);
            if again == s {
                return Some((s, info));
            }
            if again & !FLAGS == s & !FLAGS {
                continue; // a flag flipped: re-read for an exact state word
            }
            if phase(again) != OCCUPIED {
                return None;
            }
        }
    }

    pub fn slot_info(&self, slot: usize) -> Option<SlotInfo> {
        self.snapshot(slot).map(|(_, info)| info)
    }

    /// Hot path (a handler polling `job.is_cancelled()`): one atomic load.
    pub fn is_cancelled(&self, slot: usize) -> bool {
        self.state(slot).load(Ordering::Relaxed) & CANCELLED != 0
    }

    /// Marks `slot`'s attempt as started, just before its handler runs: the attempts of a
    /// dead worker that never started go back unspent (`release_worker` tells which).
    pub fn mark_started(&self, slot: usize) {
        let state = self.state(slot);
        let mut s = state.load(Ordering::Relaxed);
        // A CAS on the exact word: a cancel bit set meanwhile is kept, a freed slot untouched.
        while phase(s) == OCCUPIED && s & STARTED == 0 {
            match state.compare_exchange(s, s | STARTED, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    /// Flags every occupied slot running `job_id` (and `run_lease`, when given).
    /// Returns how many slots were flagged.
    pub fn cancel(&self, job_id: i64, run_lease: Option<i64>) -> usize {
        self.flag_where(|_, info| {
            info.job_id == job_id && run_lease.is_none_or(|l| l == info.run_lease)
        })
    }

    /// Flags every occupied slot of `worker`.
    pub fn cancel_worker(&self, worker: u32) -> usize {
        self.flag_where(|s, _| worker_of(s) == worker)
    }

    fn flag_where(&self, pred: impl Fn(u64, &SlotInfo) -> bool) -> usize {
        let mut n = 0;
        for slot in 0..self.slots {
            while let Some((s, info)) = self.snapshot(slot) {
                if !pred(s, &info) {
                    break;
                }
                // CAS on the exact state word: fails if the slot changed hands meanwhile.
                match self.state(slot).compare_exchange(
                    s,
                    s | CANCELLED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        n += 1;
                        break;
                    }
                    Err(_) => continue,
                }
            }
        }
        n
    }

    /// Every occupied slot's snapshot (heartbeat: one UPDATE for all of them).
    pub fn occupied(&self) -> Vec<SlotInfo> {
        (0..self.slots).filter_map(|s| self.slot_info(s)).collect()
    }

    /// Frees every slot of a dead `worker`, returning its attempts and their queue units.
    ///
    /// A slot the worker left CLAIMING (killed inside `acquire_slot`) is freed too; it held
    /// no published attempt, so it is not returned. Nor is one it left RELEASING (killed
    /// inside `release_slot`, its outcome already pushed): its unit goes back unless the
    /// queue's tag shows it already did.
    pub fn release_worker(&self, worker: u32) -> Vec<SlotInfo> {
        let mut out = Vec::new();
        for slot in 0..self.slots {
            if let Some(info) = self.take_slot(slot, |s| worker_of(s) == worker) {
                out.push(info);
                continue;
            }
            let s = self.state(slot).load(Ordering::Acquire);
            if worker_of(s) != worker {
                continue;
            }
            match phase(s) {
                CLAIMING => {
                    let _ = self.state(slot).compare_exchange(
                        s,
                        with(gen_of(s), 0, FREE),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                }
                RELEASING => {
                    let queue = self.s_u32(slot, S_QUEUE).load(Ordering::Relaxed) as usize;
                    let tag = release_tag(slot, gen_of(s));
                    if !self.unit_returned(queue, tag) {
                        self.return_unit(queue, tag);
                    }
                    self.finish_release(slot, s);
                }
                _ => {}
            }
        }
        out
    }

    // ------------------------------------------------------------ raw access

    fn hint(&self) -> &AtomicU64 {
        // SAFETY: constant aligned offset inside the mapping.
        unsafe { self.map.at(OFF_HINT) }
    }

    fn capacity_word(&self, queue: usize) -> &AtomicI64 {
        assert!(queue < self.queues);
        // SAFETY: queue < queues, aligned 8-byte field inside its line.
        unsafe { self.map.at(OFF_QUEUES + queue * QUEUE_BYTES + Q_CAPACITY) }
    }

    fn in_flight_word(&self, queue: usize) -> &AtomicU64 {
        assert!(queue < self.queues);
        // SAFETY: as in `capacity_word`.
        unsafe { self.map.at(OFF_QUEUES + queue * QUEUE_BYTES + Q_IN_FLIGHT) }
    }

    fn slot_off(&self, slot: usize) -> usize {
        assert!(slot < self.slots);
        OFF_QUEUES + self.queues * QUEUE_BYTES + slot * SLOT_BYTES
    }

    fn state(&self, slot: usize) -> &AtomicU64 {
        // SAFETY: slot checked in slot_off; aligned field inside the slot's line.
        unsafe { self.map.at(self.slot_off(slot) + S_STATE) }
    }

    fn s_i64(&self, slot: usize, field: usize) -> &AtomicI64 {
        // SAFETY: as in `state`.
        unsafe { self.map.at(self.slot_off(slot) + field) }
    }

    fn s_u32(&self, slot: usize, field: usize) -> &AtomicU32 {
        // SAFETY: as in `state`.
        unsafe { self.map.at(self.slot_off(slot) + field) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn rejects_bad_arguments() {
        assert!(matches!(
            InFlight::new(&[], 4),
            Err(InFlightError::InvalidArg("capacities", _))
        ));
        assert!(matches!(
            InFlight::new(&[1, -1], 4),
            Err(InFlightError::InvalidArg("capacities", _))
        ));
        assert!(matches!(
            InFlight::new(&[1], 0),
            Err(InFlightError::InvalidArg("slots", _))
        ));
        let t = InFlight::new(&[1, 2], 4).unwrap();
        assert!(matches!(
            t.queue_index(2),
            Err(InFlightError::Index("queue", 2, 2))
        ));
        assert!(t.queue_index(-1).is_err());
        assert!(t.slot_index(4).is_err());
        assert_eq!(t.slot_index(3).unwrap(), 3);
    }

    #[test]
    fn reserve_release_and_capacity() {
        let t = InFlight::new(&[3, 0], 8).unwrap();
        assert_eq!(t.reserve(0, 2), 2);
        assert_eq!(t.reserve(0, 5), 1);
        assert_eq!(t.reserve(0, 1), 0);
        assert_eq!(t.reserve(1, 1), 0);
        assert_eq!((t.in_flight(0), t.free(0), t.capacity(0)), (3, 0, 3));
        t.release(0, 2).unwrap();
        assert_eq!(t.free(0), 2);
        assert!(matches!(
            t.release(0, 5),
            Err(InFlightError::OverRelease { .. })
        ));
        t.set_capacity(0, 0).unwrap();
        assert_eq!(t.free(0), 0);
        assert_eq!(t.reserve(0, 1), 0);
        t.set_capacity(0, 10).unwrap();
        assert_eq!(t.reserve(0, 100), 9);
        assert_eq!(t.total_in_flight(), 10);
        let two = InFlight::new(&[4, 4], 8).unwrap();
        two.reserve(0, 1);
        two.reserve(1, 3);
        assert_eq!(two.total_in_flight(), 4);
        two.release(1, 3).unwrap();
        two.release(0, 1).unwrap();
        assert_eq!(two.total_in_flight(), 0);
    }

    #[test]
    fn concurrent_reserve_never_exceeds_capacity() {
        let t = Arc::new(InFlight::new(&[10], 8).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    for i in 0..50_000 {
                        let got = t.reserve(0, 1 + i % 3);
                        let now = t.in_flight(0);
                        assert!(now <= 10, "in flight {now} over capacity");
                        if got > 0 {
                            t.release(0, got).unwrap();
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(t.in_flight(0), 0);
    }

    #[test]
    fn slots_lifecycle_cancel_and_release_worker() {
        let t = InFlight::new(&[4, 4], 4).unwrap();
        assert_eq!(t.reserve(0, 3), 3);
        assert_eq!(t.reserve(1, 1), 1);
        let a = t.acquire_slot(100, 1, 0, 7).unwrap();
        let b = t.acquire_slot(101, 1, 0, 7).unwrap();
        let c = t.acquire_slot(102, 5, 1, 8).unwrap();
        let d = t.acquire_slot(103, 1, 0, 8).unwrap();
        assert!(matches!(
            t.acquire_slot(104, 1, 0, 8),
            Err(InFlightError::Full)
        ));
        assert_eq!(
            t.slot_info(c),
            Some(SlotInfo {
                job_id: 102,
                run_lease: 5,
                queue: 1,
                worker: 8,
                cancelled: false,
                started: false
            })
        );
        assert_eq!(t.cancel(102, Some(4)), 0);
        assert_eq!(t.cancel(102, Some(5)), 1);
        assert!(t.is_cancelled(c) && !t.is_cancelled(a));
        assert_eq!(t.cancel(100, None), 1);
        assert!(t.is_cancelled(a));
        assert_eq!(t.cancel_worker(8), 2);
        assert!(t.is_cancelled(d));
        assert!(!t.is_cancelled(b));

        let mut running: Vec<_> = t.occupied().iter().map(|i| i.job_id).collect();
        running.sort();
        assert_eq!(running, vec![100, 101, 102, 103]);

        assert!(t.release_slot(d));
        assert!(!t.release_slot(d));
        assert_eq!(t.in_flight(0), 2);
        let mut gone: Vec<_> = t
            .release_worker(7)
            .iter()
            .map(|i| (i.job_id, i.run_lease, i.queue))
            .collect();
        gone.sort();
        assert_eq!(gone, vec![(100, 1, 0), (101, 1, 0)]);
        assert_eq!(t.in_flight(0), 0);
        assert_eq!(t.in_flight(1), 1);
        assert!(t.slot_info(a).is_none());
        // Reused slot starts uncancelled.
        let e = t.acquire_slot(200, 1, 0, 9).unwrap();
        assert!(!t.is_cancelled(e));
        assert_eq!(t.occupied().len(), 2);
    }

    #[test]
    fn dead_claiming_slot_is_reclaimed() {
        let t = InFlight::new(&[4], 2).unwrap();
        // Simulate a worker killed between its claim CAS and publishing the fields.
        t.state(1).store(with(1, 3, CLAIMING), Ordering::Relaxed);
        assert!(t.release_worker(3).is_empty());
        assert_eq!(phase(t.state(1).load(Ordering::Relaxed)), FREE);
    }

    /// A worker (7) holding one job of queue 0, and the slot it runs in.
    fn one_running() -> (InFlight, usize) {
        let t = InFlight::new(&[2], 4).unwrap();
        assert_eq!(t.reserve(0, 1), 1);
        let slot = t.acquire_slot(100, 1, 0, 7).unwrap();
        (t, slot)
    }

    #[test]
    fn worker_killed_before_giving_its_unit_back_leaks_nothing() {
        let (t, slot) = one_running();
        t.begin_release(slot, |_| true).unwrap(); // killed right after
        assert!(
            t.occupied().is_empty(),
            "its outcome is pushed: not reported lost"
        );
        assert!(t.release_worker(7).is_empty());
        assert_eq!(t.in_flight(0), 0);
        assert_eq!(phase(t.state(slot).load(Ordering::Relaxed)), FREE);
    }

    #[test]
    fn worker_killed_after_giving_its_unit_back_is_not_counted_twice() {
        let (t, slot) = one_running();
        assert_eq!(t.reserve(0, 1), 1); // a second unit, claimed for the worker meanwhile
        let (releasing, info) = t.begin_release(slot, |_| true).unwrap();
        t.return_unit(info.queue as usize, release_tag(slot, gen_of(releasing)));
        // killed before freeing the slot
        assert!(t.release_worker(7).is_empty());
        assert_eq!(t.in_flight(0), 1);
        assert_eq!(phase(t.state(slot).load(Ordering::Relaxed)), FREE);
    }

    #[test]
    fn the_release_tag_survives_reservations_and_marks_each_generation() {
        let (t, slot) = one_running();
        assert!(t.release_slot(slot));
        let gen = gen_of(t.state(slot).load(Ordering::Relaxed));
        assert!(t.unit_returned(0, release_tag(slot, gen)));
        assert_eq!(t.reserve(0, 2), 2);
        t.release(0, 1).unwrap();
        assert!(t.unit_returned(0, release_tag(slot, gen)));
        assert!(!t.unit_returned(0, release_tag(slot, gen + 1)));
        assert_eq!(t.in_flight(0), 1);
    }

    #[test]
    fn capacity_above_the_count_width_is_refused() {
        assert!(InFlight::new(&[MAX_CAPACITY + 1], 4).is_err());
        let t = InFlight::new(&[MAX_CAPACITY], 4).unwrap();
        assert_eq!(t.reserve(0, i64::MAX), MAX_CAPACITY);
        assert!(t.set_capacity(0, MAX_CAPACITY + 1).is_err());
    }

    #[test]
    fn concurrent_slot_churn_keeps_snapshots_consistent() {
        let t = Arc::new(InFlight::new(&[1_000_000], 16).unwrap());
        let workers: Vec<_> = (0..3u32)
            .map(|w| {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    for i in 0..20_000i64 {
                        let id = (w as i64) * 1_000_000 + i;
                        assert_eq!(t.reserve(0, 1), 1);
                        let s = t.acquire_slot(id, id * 2, 0, w).unwrap();
                        let info = t.slot_info(s).unwrap();
                        assert_eq!((info.job_id, info.worker), (id, w));
                        assert!(t.release_slot(s));
                    }
                })
            })
            .collect();
        let reader = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for _ in 0..2_000 {
                    for info in t.occupied() {
                        // Fields of one snapshot always belong together.
                        assert_eq!(info.run_lease, info.job_id * 2);
                        assert_eq!(info.job_id / 1_000_000, info.worker as i64);
                    }
                    t.cancel_worker(1);
                }
            })
        };
        for h in workers {
            h.join().unwrap();
        }
        reader.join().unwrap();
        assert_eq!(t.in_flight(0), 0);
        assert!(t.occupied().is_empty());
    }

    #[test]
    fn a_dead_workers_attempts_say_whether_they_started() {
        let t = InFlight::new(&[4], 8).unwrap();
        assert_eq!(t.reserve(0, 3), 3);
        let running = t.acquire_slot(1, 1, 0, 2).unwrap();
        let queued = t.acquire_slot(2, 1, 0, 2).unwrap();
        let cancelled = t.acquire_slot(3, 1, 0, 2).unwrap();
        t.mark_started(running);
        assert_eq!(t.cancel(3, None), 1);
        t.mark_started(cancelled); // the cancel bit is kept
        t.mark_started(cancelled); // and marking twice changes nothing
        assert!(t.is_cancelled(cancelled));
        let mut freed: Vec<(i64, bool, bool)> = t
            .release_worker(2)
            .into_iter()
            .map(|i| (i.job_id, i.started, i.cancelled))
            .collect();
        freed.sort();
        assert_eq!(
            freed,
            vec![(1, true, false), (2, false, false), (3, true, true)]
        );
        assert_eq!(t.in_flight(0), 0);
        t.mark_started(queued); // a freed slot stays free
        assert_eq!(t.slot_info(queued), None);
    }
}
