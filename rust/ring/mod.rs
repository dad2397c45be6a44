//! Multi-producer, single-consumer ring of outcome records in anonymous shared memory.
//!
//! Worker processes (producers) report each finished attempt here; the supervisor's committer
//! (the single consumer) drains it in batches. The ring is created before `fork()`, so every
//! process sees the same slots.
//!
//! The code is split by side: `producer.rs` reserves, claims, writes and publishes records;
//! `consumer.rs` looks at the head, takes stalled positions back and pops; `process.rs`
//! says which process holds a claim and whether it is gone. `tests.rs` holds the unit tests,
//! and `model.rs` runs every interleaving of the protocol steps up to small bounds.
//!
//! # Layout
//! A header (one cache line per independently written word, so producers bumping `tail` do not
//! invalidate the consumer's `head` line) followed by `capacity` slots of `slot_bytes` each.
//! Every slot starts with two words:
//! - `seq`: the slot's state for position `p` (a monotonically increasing 64-bit counter; the
//!   slot index is `p & mask`): *free for p* when `seq == p`, *claimed* by the producer with
//!   process id `pid` when `seq == CLAIMED | pid << 32 | (p as u32)`, *published* when
//!   `seq == p + 1`, and free for the next lap once the consumer stores `p + capacity`.
//! - `meta`: `(p as u32) << 32 | k`, written only by a producer holding its record's first
//!   slot claimed. In a first slot `k >= 1` is the number of slots of the record;
//!   continuation slots carry `k == 0`.
//!
//! A record is its fixed header (job id, run lease, number, kind, payload length, code) plus its
//! payload, written in the first slot and, when the payload does not fit, in `k - 1` following
//! continuation slots. A producer reserves all `k` positions with one CAS on `tail`.
//!
//! # Ownership: nobody writes a slot it does not hold
//! A producer writes its record only while it holds the first slot claimed (CAS `p ->
//! claimed`), which the consumer's skip must win to take the slot back; the consumer takes a
//! continuation back only together with its first slot, from a claimant that is gone, so the
//! claim covers the whole record. Each slot is published with a CAS (`p -> p + 1` for a
//! continuation, `claimed -> p + 1` for the first slot); the consumer reads a slot only
//! between seeing `p + 1` and freeing it. The producer writes `meta` right after its claim, so
//! a claimed first slot always names its record's length.
//!
//! # Memory ordering
//! - Producer: the reservation CAS on `tail` only arbitrates who owns which positions. Before
//!   it, the last wanted slot's `seq` is loaded with Acquire, and the first slot's claim CAS
//!   is Acquire: both pair with the consumer's Release frees of the previous lap (made in
//!   position order), so its reads of that lap happen-before our writes. Each publish CAS is
//!   Release (continuations first, first slot last), so every byte of the record
//!   happens-before a consumer that Acquires the first slot's `p + 1`.
//! - Consumer: loads the first slot's `seq` with Acquire and frees slots in position order
//!   with Release stores (or a CAS, when taking a slot back).
//! - Sleep/wake: Dekker-style. The consumer sets `consumer_sleeping`, issues a SeqCst fence and
//!   re-checks the head slot before `FUTEX_WAIT`; a producer publishes, issues a SeqCst fence
//!   and reads `consumer_sleeping`. The fences guarantee at least one side sees the other, so
//!   a wake-up is never lost, and producers only pay a syscall when the consumer sleeps.
//!   Full-ring waits by producers mirror this with the `producers_waiting` flag and
//!   `space_seq`; the consumer clears the flag when it wakes them, so a producer killed while
//!   asleep costs at most one needless wake.
//!
//! # Stalled and dead producers
//! A head position reserved but still unpublished after `stall_timeout` is looked at again:
//! - *unclaimed* (the producer stopped or died between its tail CAS and its claim): the
//!   consumer takes the slot back with a CAS that the producer's claim must also win. A
//!   producer that loses it has written nothing and reserves again; one that died leaves
//!   any continuation slots unclaimed, each taken back after its own `stall_timeout`.
//! - *claimed*: the consumer takes the record's slots back only once the claimant's process is
//!   gone (`kill(pid, 0)` fails with ESRCH, or it is a zombie). A producer that is merely
//!   stopped keeps its slots for as long as it is stopped, however long: records behind it
//!   wait, and none is ever overwritten.

mod consumer;
#[cfg(test)]
mod model;
mod process;
mod producer;
#[cfg(test)]
mod tests;

pub use consumer::{Consumer, Head, RecordView};

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::shm::{SharedMap, CACHE_LINE};

use consumer::ConsumerState;

// Header offsets: one cache line per group of words written by the same side.
const OFF_TAIL: usize = 0; // producers (CAS)
const OFF_HEAD: usize = CACHE_LINE; // consumer
const OFF_SKIPPED: usize = CACHE_LINE + 8; // consumer
const OFF_DATA_SEQ: usize = 2 * CACHE_LINE; // futex word the consumer sleeps on
const OFF_SLEEPING: usize = 2 * CACHE_LINE + 4; // consumer advertises it sleeps
const OFF_SPACE_SEQ: usize = 3 * CACHE_LINE; // futex word blocked producers sleep on
const OFF_WAITERS: usize = 3 * CACHE_LINE + 4; // set by producers sleeping on a full ring
const OFF_SLOTS: usize = 4 * CACHE_LINE;

// Slot layout.
const SLOT_SEQ: usize = 0;
const SLOT_META: usize = 8;
const REC_JOB_ID: usize = 16;
const REC_RUN_LEASE: usize = 24;
const REC_NUMBER: usize = 32;
const REC_KIND: usize = 40;
const REC_PAYLOAD_LEN: usize = 44;
const REC_CODE: usize = 48;
const FIRST_PAYLOAD: usize = 56;
const CONT_PAYLOAD: usize = 16;

/// Marks a claimed `seq`; positions never reach this bit, so a claimed slot reads as "not free
/// yet" to the reservation's signed distance check.
const CLAIMED: u64 = 1 << 63;

/// Smallest slot: a first slot must hold the record header plus a little payload.
pub const MIN_SLOT_BYTES: usize = 64;
/// Largest slot accepted (a slot is a unit of reservation, not a buffer).
pub const MAX_SLOT_BYTES: usize = 1 << 20;
/// Largest number of slots accepted.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Busy-wait iterations before a waiter goes to the futex: a record usually arrives within a
/// few microseconds under load, and a futex round trip costs more than that.
const SPIN_ITERS: u32 = 128;
/// A full-ring producer re-checks at least this often, so a missed wake-up (e.g. a consumer
/// killed between freeing and waking) can only delay it, never block it forever.
const PRODUCER_NAP: Duration = Duration::from_millis(50);

/// The fixed part of an outcome record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub job_id: i64,
    pub run_lease: i64,
    pub code: u8,
    pub kind: u32,
    pub number: f64,
}

/// Why a ring operation failed.
#[derive(Debug)]
pub enum RingError {
    /// A constructor argument is out of range: (argument name, explanation).
    InvalidArg(&'static str, String),
    /// The payload needs more slots than the ring has.
    TooLarge { len: usize, max: usize },
    /// The deadline passed while the ring stayed full.
    Timeout,
    /// The consumer took back a slot this producer had claimed: it judged the process gone.
    Skipped,
    /// Another thread of this process is draining: the ring has a single consumer.
    ConsumerBusy,
    /// The shared mapping could not be created.
    Os(io::Error),
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::InvalidArg(name, why) => write!(f, "{name}: {why}"),
            RingError::TooLarge { len, max } => write!(
                f,
                "payload of {len} bytes does not fit in the ring (at most {max} bytes)"
            ),
            RingError::Timeout => write!(f, "outcome ring stayed full until the timeout"),
            RingError::Skipped => write!(
                f,
                "record was skipped by the consumer: it found the producer's process gone"
            ),
            RingError::ConsumerBusy => write!(
                f,
                "OutcomeRing has a single consumer: another thread is draining it"
            ),
            RingError::Os(e) => write!(f, "shared memory: {e}"),
        }
    }
}

impl std::error::Error for RingError {}

/// Where a test can hold a producer (see `OutcomeRing::pause_at`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Positions reserved on the tail, first slot not claimed yet.
    Reserved,
    /// First slot claimed, nothing written yet.
    Claimed,
    /// Continuations published, record written, first slot not published yet.
    Written,
}

#[cfg(test)]
type PauseHook = Box<dyn Fn(Pause, &Outcome) + Send + Sync>;

#[inline]
fn claimed(pos: u64, pid: u32) -> u64 {
    CLAIMED | (pid as u64) << 32 | (pos & 0xffff_ffff)
}

#[inline]
fn tag(pos: u64) -> u64 {
    (pos & 0xffff_ffff) << 32
}

/// The ring. Cheap to share by reference between threads; share between processes by
/// creating it before `fork()`.
pub struct OutcomeRing {
    map: SharedMap,
    capacity: u64,
    mask: u64,
    slot_bytes: usize,
    stall_timeout: Duration,
    consumer: Mutex<ConsumerState>,
    #[cfg(test)]
    pause: std::sync::OnceLock<PauseHook>,
}

impl OutcomeRing {
    /// Maps a ring of `capacity` slots of `slot_bytes` bytes.
    ///
    /// `capacity` must be a power of two (positions map to slots with a mask) and `slot_bytes`
    /// a multiple of 8 (slot words are 8-byte atomics) of at least 64.
    pub fn new(
        capacity: usize,
        slot_bytes: usize,
        stall_timeout: Duration,
    ) -> Result<Self, RingError> {
        if capacity < 2 || !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
            return Err(RingError::InvalidArg(
                "capacity",
                format!("must be a power of two between 2 and {MAX_CAPACITY}, got {capacity}"),
            ));
        }
        if !(MIN_SLOT_BYTES..=MAX_SLOT_BYTES).contains(&slot_bytes) || slot_bytes % 8 != 0 {
            return Err(RingError::InvalidArg(
                "slot_bytes",
                format!(
                    "must be a multiple of 8 between {MIN_SLOT_BYTES} and {MAX_SLOT_BYTES}, got {slot_bytes}"
                ),
            ));
        }
        let len = capacity
            .checked_mul(slot_bytes)
            .and_then(|n| n.checked_add(OFF_SLOTS))
            .ok_or_else(|| {
                RingError::InvalidArg("capacity", "capacity * slot_bytes overflows".into())
            })?;
        let map = SharedMap::new(len).map_err(RingError::Os)?;
        let ring = Self {
            map,
            capacity: capacity as u64,
            mask: capacity as u64 - 1,
            slot_bytes,
            stall_timeout,
            consumer: Mutex::new(ConsumerState::default()),
            #[cfg(test)]
            pause: std::sync::OnceLock::new(),
        };
        // Slot i starts free for position i. Nobody else can see the map yet.
        for i in 0..capacity as u64 {
            ring.seq(i).store(i, Ordering::Relaxed);
        }
        Ok(ring)
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Bytes per slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// How long a reserved slot may stay unpublished before the consumer looks at its owner.
    pub fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// Records skipped because their producer stalled before claiming, or died.
    pub fn skipped(&self) -> u64 {
        self.word64(OFF_SKIPPED).load(Ordering::Relaxed)
    }

    /// Reserved-but-not-consumed slots: equals pending records when each fits in one slot.
    pub fn pending_slots(&self) -> u64 {
        let head = self.word64(OFF_HEAD).load(Ordering::Relaxed);
        let tail = self.word64(OFF_TAIL).load(Ordering::Relaxed);
        tail.saturating_sub(head)
    }

    /// Largest payload a single record can carry in this ring.
    pub fn max_payload(&self) -> usize {
        self.payload_room(self.capacity)
    }

    /// Payload bytes a record of `k` slots holds.
    fn payload_room(&self, k: u64) -> usize {
        let sb = self.slot_bytes;
        (sb - FIRST_PAYLOAD) + (k as usize).saturating_sub(1) * (sb - CONT_PAYLOAD)
    }

    /// Slots needed by a payload of `len` bytes.
    pub fn slots_for(&self, len: usize) -> Result<u64, RingError> {
        let first = self.slot_bytes - FIRST_PAYLOAD;
        let cont = self.slot_bytes - CONT_PAYLOAD;
        let k = if len <= first {
            1
        } else {
            1 + (len - first).div_ceil(cont)
        };
        if k as u64 > self.capacity || len > u32::MAX as usize {
            return Err(RingError::TooLarge {
                len,
                max: self.max_payload().min(u32::MAX as usize),
            });
        }
        Ok(k as u64)
    }

    // ---------------------------------------------------------------- raw access

    #[inline]
    fn slot_ptr(&self, pos: u64) -> *mut u8 {
        let idx = (pos & self.mask) as usize;
        // SAFETY: idx < capacity, so the slot lies inside the mapping.
        unsafe { self.map.as_ptr().add(OFF_SLOTS + idx * self.slot_bytes) }
    }

    #[inline]
    fn seq(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: slot starts are 8-aligned (OFF_SLOTS and slot_bytes are multiples of 8).
        unsafe { &*self.slot_ptr(pos).add(SLOT_SEQ).cast::<AtomicU64>() }
    }

    #[inline]
    fn meta(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: as in `seq`.
        unsafe { &*self.slot_ptr(pos).add(SLOT_META).cast::<AtomicU64>() }
    }

    #[inline]
    fn word64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: header offsets are constants, aligned and inside the mapping.
        unsafe { self.map.at(off) }
    }

    #[inline]
    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`.
        unsafe { self.map.at(off) }
    }
}
