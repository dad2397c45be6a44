//! The in-flight table: per-queue capacity counters and per-attempt slots in shared memory.
//!
//! The supervisor's dispatcher sizes each claim by the free capacity of its queue
//! ([`InFlight::reserve`]); every running attempt occupies a slot (job id, run lease, queue,
//! worker, cancel flag) that the heartbeat, the rescuer and the cancel path read from any
//! process. Everything is lock-free: a worker SIGKILLed mid-call can leave at most one slot in
//! a transient state, which [`InFlight::release_worker`] reclaims.
//!
//! `capacity.rs` holds the per-queue counters and `slots.rs` the attempt slots; this file
//! has the shared layout, the state-word encoding and the raw accessors both build on.
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

mod capacity;
mod slots;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

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
