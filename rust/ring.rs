//! Multi-producer, single-consumer ring of outcome records in anonymous shared memory.
//!
//! Worker processes (producers) report each finished attempt here; the supervisor's committer
//! (the single consumer) drains it in batches. The ring is created before `fork()`, so every
//! process sees the same slots.
//!
//! (This file is past 800 lines because its unit tests sit beside the code as in every module
//! here; the ring itself is one concept and stays in one file.)
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

use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, TryLockError};
use std::time::{Duration, Instant};

use crate::shm::{futex_wait, futex_wake, SharedMap, CACHE_LINE};

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

/// Consumer-local bookkeeping (not shared: there is exactly one consumer).
#[derive(Default)]
struct ConsumerState {
    /// The head position and `seq` first seen stalled, and since when.
    stall: Option<(u64, u64, Instant)>,
}

/// What the consumer finds at its head position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// Published: a record can be popped.
    Ready,
    /// Reserved but unpublished: look again by this time at the latest.
    Pending(Instant),
    /// Nothing reserved.
    Empty,
}

/// The process id a producer claims slots with, cached (`getpid` is a syscall).
fn own_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    static FORGET_IN_CHILD: Once = Once::new();
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    #[cfg(test)]
    if let Some(pid) = fake_process::pid() {
        return pid;
    }
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    // SAFETY: registering an atfork child handler that only stores to an atomic (async-signal
    // safe); it keeps a forked child from claiming slots with its parent's pid.
    FORGET_IN_CHILD.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Whether process `pid` has exited (gone, or a zombie not reaped yet).
fn process_gone(pid: u32) -> bool {
    #[cfg(test)]
    if let Some(gone) = fake_process::gone(pid) {
        return gone;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // A killed child keeps its pid until its parent reaps it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .is_some_and(|state| state == 'Z' || state == 'X')
}

/// Test doubles for process identity: a model-check thread claims slots under a pid of its own
/// and "dies" by having that pid marked gone.
#[cfg(test)]
pub(crate) mod fake_process {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// Above any real pid (`pid_max` is at most 2^22), below the 31 bits a claim holds.
    const BASE: u32 = 0x4000_0000;
    static NEXT: AtomicU32 = AtomicU32::new(BASE);
    static GONE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    std::thread_local!(static PID: Cell<Option<u32>> = const { Cell::new(None) });

    /// A fake pid nobody uses yet.
    pub fn fresh() -> u32 {
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes the calling thread claim slots as `pid`.
    pub fn assume(pid: u32) {
        PID.set(Some(pid));
    }

    pub fn pid() -> Option<u32> {
        PID.get()
    }

    pub fn kill(pid: u32) {
        GONE.lock().unwrap().push(pid);
    }

    /// Whether a fake pid is gone; `None` for a real one.
    pub fn gone(pid: u32) -> Option<bool> {
        (pid >= BASE).then(|| GONE.lock().unwrap().contains(&pid))
    }
}

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

/// A published record at the consumer's head, valid until the consumer frees it.
pub struct RecordView<'a> {
    ring: &'a OutcomeRing,
    pos: u64,
    slots: u64,
}

impl RecordView<'_> {
    /// The fixed fields.
    pub fn outcome(&self) -> Outcome {
        let p = self.ring.slot_ptr(self.pos);
        // SAFETY: the slot was published (Acquire on seq) and nobody writes it until the
        // consumer frees it, which cannot happen while `self` borrows the consumer; offsets
        // are aligned and inside the slot.
        unsafe {
            Outcome {
                job_id: ptr::read(p.add(REC_JOB_ID).cast::<i64>()),
                run_lease: ptr::read(p.add(REC_RUN_LEASE).cast::<i64>()),
                number: f64::from_bits(ptr::read(p.add(REC_NUMBER).cast::<u64>())),
                kind: ptr::read(p.add(REC_KIND).cast::<u32>()),
                code: ptr::read(p.add(REC_CODE)),
            }
        }
    }

    /// Payload length in bytes, never more than the record's slots hold.
    pub fn payload_len(&self) -> usize {
        // SAFETY: as in `outcome`.
        let stored = unsafe {
            ptr::read(
                self.ring
                    .slot_ptr(self.pos)
                    .add(REC_PAYLOAD_LEN)
                    .cast::<u32>(),
            )
        };
        (stored as usize).min(self.ring.payload_room(self.slots))
    }

    /// Copies the payload into `out`, which must be exactly `payload_len()` bytes.
    pub fn copy_payload(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.payload_len());
        let sb = self.ring.slot_bytes;
        let mut done = 0;
        let mut pos = self.pos;
        let mut off = FIRST_PAYLOAD;
        while done < out.len() {
            let n = (sb - off).min(out.len() - done);
            // SAFETY: `payload_len` bounds the copy to the record's `slots` published slots,
            // held as in `outcome`; `off + n <= slot_bytes`.
            unsafe {
                ptr::copy_nonoverlapping(
                    self.ring.slot_ptr(pos).add(off),
                    out.as_mut_ptr().add(done),
                    n,
                );
            }
            done += n;
            pos += 1;
            off = CONT_PAYLOAD;
        }
    }

    /// Appends the payload to `out`.
    pub fn append_payload(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.payload_len(), 0);
        self.copy_payload(&mut out[start..]);
    }
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

    // ---------------------------------------------------------------- producer side

    /// Pushes one record, waiting while the ring is full until `deadline` (forever if `None`).
    ///
    /// Never drops: a full ring is backpressure. Spins briefly, then sleeps on a futex that the
    /// consumer bumps after freeing slots.
    pub fn push(
        &self,
        rec: &Outcome,
        payload: &[u8],
        deadline: Option<Instant>,
    ) -> Result<(), RingError> {
        let k = self.slots_for(payload.len())?;
        let mut spins = 0;
        loop {
            if let Some(pos) = self.try_reserve(k) {
                if self.write_and_publish(pos, k, rec, payload)? {
                    return Ok(());
                }
                continue; // taken back before we claimed it: nothing written, reserve again
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RingError::Timeout);
            }
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            self.sleep_until_space(k, deadline);
        }
    }

    /// Pushes only if there is room now; `Ok(false)` when the ring is full.
    pub fn try_push(&self, rec: &Outcome, payload: &[u8]) -> Result<bool, RingError> {
        let k = self.slots_for(payload.len())?;
        while let Some(pos) = self.try_reserve(k) {
            if self.write_and_publish(pos, k, rec, payload)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Claims positions `[pos, pos + k)` with one CAS on the tail, or `None` if full.
    fn try_reserve(&self, k: u64) -> Option<u64> {
        let tail = self.word64(OFF_TAIL);
        let mut t = tail.load(Ordering::Relaxed);
        loop {
            let last = t + k - 1;
            // Acquire pairs with the consumer's Release free of `last`; it frees in position
            // order, so its reads of the previous lap of every slot in the range happen-before
            // our writes (the first slot's claim CAS is Acquire as well).
            let seq = self.seq(last).load(Ordering::Acquire);
            let diff = seq.wrapping_sub(last) as i64;
            if diff == 0 {
                match tail.compare_exchange_weak(t, t + k, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return Some(t),
                    Err(now) => t = now,
                }
            } else if diff < 0 {
                // The consumer has not freed position `last - capacity` yet (or a producer
                // still holds it claimed): full, unless the tail moved under us.
                let now = tail.load(Ordering::Relaxed);
                if now == t {
                    return None;
                }
                t = now;
            } else {
                t = tail.load(Ordering::Relaxed);
            }
        }
    }

    /// True when `k` slots could be reserved right now (no reservation made).
    fn has_space(&self, k: u64) -> bool {
        let t = self.word64(OFF_TAIL).load(Ordering::SeqCst);
        let last = t + k - 1;
        (self.seq(last).load(Ordering::SeqCst).wrapping_sub(last) as i64) >= 0
    }

    /// Claims, writes and publishes reserved positions `[pos, pos + k)`. `Ok(false)` when the
    /// consumer took the first slot back before our claim: nothing was written.
    fn write_and_publish(
        &self,
        pos: u64,
        k: u64,
        rec: &Outcome,
        payload: &[u8],
    ) -> Result<bool, RingError> {
        self.pause(Pause::Reserved, rec);
        let pid = own_pid();
        if !self.claim(pos, pid) {
            return Ok(false);
        }
        self.pause(Pause::Claimed, rec);
        let tag = tag(pos);
        // Tell a consumer that may find us dead how many slots we own.
        self.meta(pos).store(tag | k, Ordering::Relaxed);

        let sb = self.slot_bytes;
        let first_len = payload.len().min(sb - FIRST_PAYLOAD);
        // Continuation slots first, so that publishing the first slot publishes the record.
        let mut off = first_len;
        for j in 1..k {
            let p = pos + j;
            let n = (sb - CONT_PAYLOAD).min(payload.len() - off);
            self.meta(p).store(tag, Ordering::Relaxed);
            // SAFETY: position `p` is ours while our first slot is claimed (the consumer takes
            // a continuation back only with its first slot, from a gone claimant), so nobody
            // else reads or writes the slot; `CONT_PAYLOAD + n <= sb`, `off + n <= len`.
            unsafe {
                ptr::copy_nonoverlapping(
                    payload.as_ptr().add(off),
                    self.slot_ptr(p).add(CONT_PAYLOAD),
                    n,
                );
            }
            off += n;
            self.publish(p, p)?;
        }

        let s = self.slot_ptr(pos);
        // SAFETY: we hold position `pos` claimed; offsets are aligned and inside the slot.
        unsafe {
            ptr::write(s.add(REC_JOB_ID).cast::<i64>(), rec.job_id);
            ptr::write(s.add(REC_RUN_LEASE).cast::<i64>(), rec.run_lease);
            ptr::write(s.add(REC_NUMBER).cast::<u64>(), rec.number.to_bits());
            ptr::write(s.add(REC_KIND).cast::<u32>(), rec.kind);
            ptr::write(s.add(REC_PAYLOAD_LEN).cast::<u32>(), payload.len() as u32);
            ptr::write(s.add(REC_CODE), rec.code);
            ptr::copy_nonoverlapping(payload.as_ptr(), s.add(FIRST_PAYLOAD), first_len);
        }
        self.pause(Pause::Written, rec);
        self.publish(pos, claimed(pos, pid))?;
        self.wake_consumer();
        Ok(true)
    }

    /// Takes free position `p` for writing; false if the consumer took it back first.
    #[inline]
    fn claim(&self, p: u64, pid: u32) -> bool {
        // Acquire: pairs with the consumer's Release free, so its reads of the previous lap
        // happen-before our writes.
        self.seq(p)
            .compare_exchange(p, claimed(p, pid), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Publishes position `p`, whose `seq` we left at `from`.
    #[inline]
    fn publish(&self, p: u64, from: u64) -> Result<(), RingError> {
        // Release: our writes to the slot happen-before whoever Acquires `p + 1`.
        self.seq(p)
            .compare_exchange(from, p + 1, Ordering::Release, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| RingError::Skipped)
    }

    /// Runs the test's pause hook, if any; nothing outside tests.
    #[inline]
    fn pause(&self, _at: Pause, _rec: &Outcome) {
        #[cfg(test)]
        if let Some(hook) = self.pause.get() {
            hook(_at, _rec);
        }
    }

    /// Test hook: `hook` runs in every producer at each [`Pause`] point, and may block there.
    #[cfg(test)]
    fn pause_at(&self, hook: impl Fn(Pause, &Outcome) + Send + Sync + 'static) {
        assert!(
            self.pause.set(Box::new(hook)).is_ok(),
            "one pause hook per ring"
        );
    }

    /// Wakes the consumer if (and only if) it advertised that it sleeps.
    #[inline]
    fn wake_consumer(&self) {
        // SeqCst fence: orders our publish before the `sleeping` load (Dekker with the
        // consumer's store-fence-recheck in `wait_ready`).
        fence(Ordering::SeqCst);
        if self.word32(OFF_SLEEPING).load(Ordering::Relaxed) != 0 {
            let word = self.word32(OFF_DATA_SEQ);
            word.fetch_add(1, Ordering::SeqCst);
            futex_wake(word, 1);
        }
    }

    /// Sleeps until the consumer frees slots, the deadline passes or a nap elapses.
    fn sleep_until_space(&self, k: u64, deadline: Option<Instant>) {
        let space = self.word32(OFF_SPACE_SEQ);
        // A flag, not a count: the consumer clears it when it wakes us, so a producer killed
        // here leaves nothing raised for good.
        self.word32(OFF_WAITERS).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let seen = space.load(Ordering::SeqCst);
        if !self.has_space(k) {
            let mut nap = PRODUCER_NAP;
            if let Some(d) = deadline {
                nap = nap.min(d.saturating_duration_since(Instant::now()));
            }
            if !nap.is_zero() {
                futex_wait(space, seen, Some(nap));
            }
        }
    }

    // ---------------------------------------------------------------- consumer side

    /// The consumer handle: only one may exist at a time in this process.
    ///
    /// The ring has a single consumer; a second thread trying to drain gets
    /// [`RingError::ConsumerBusy`] instead of silently breaking the head bookkeeping. (Across
    /// processes this is the caller's contract: only the supervisor drains.)
    pub fn consumer(&self) -> Result<Consumer<'_>, RingError> {
        let state = match self.consumer.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(RingError::ConsumerBusy),
        };
        Ok(Consumer { ring: self, state })
    }

    fn head(&self) -> u64 {
        self.word64(OFF_HEAD).load(Ordering::Relaxed)
    }

    fn is_ready(&self, h: u64) -> bool {
        self.seq(h).load(Ordering::Acquire) == h + 1
    }

    /// Slots of the record whose first slot is position `h`, if its meta names it (it always
    /// does once the first slot is claimed; the tag rules out an earlier lap's meta).
    fn record_slots(&self, h: u64) -> Option<u64> {
        let meta = self.meta(h).load(Ordering::Relaxed);
        let k = meta & 0xffff_ffff;
        (meta >> 32 == h & 0xffff_ffff && (1..=self.capacity).contains(&k)).then_some(k)
    }

    /// Takes back stalled head position `h` whose `seq` read `s`; false if it changed.
    ///
    /// Unclaimed: one slot, by a CAS the producer's claim must also win (its continuations are
    /// unclaimed too, and are taken back when they reach the head). Claimed by a process
    /// that is gone: every slot of its record.
    fn skip_stalled(&self, h: u64, s: u64) -> bool {
        let k = if s == h {
            1
        } else {
            // The claimant is gone: no further write can come from it.
            self.record_slots(h).unwrap_or(1)
        };
        // AcqRel CAS: a producer's claim of `h` cannot also succeed, and the slot goes to the
        // next lap like any freed slot.
        if self
            .seq(h)
            .compare_exchange(s, h + self.capacity, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Only a gone claimant has continuations, and nobody else writes them.
        for j in 1..k {
            self.seq(h + j)
                .store(h + j + self.capacity, Ordering::Release);
        }
        self.word64(OFF_HEAD).store(h + k, Ordering::Release);
        self.word64(OFF_SKIPPED).fetch_add(1, Ordering::Relaxed);
        self.wake_producers();
        true
    }

    /// Wakes producers sleeping on a full ring, if any advertised it.
    fn wake_producers(&self) {
        // SeqCst fence: orders our free-stores before the flag load (Dekker with
        // `sleep_until_space`).
        fence(Ordering::SeqCst);
        let waiters = self.word32(OFF_WAITERS);
        if waiters.load(Ordering::Relaxed) != 0 && waiters.swap(0, Ordering::SeqCst) != 0 {
            let word = self.word32(OFF_SPACE_SEQ);
            word.fetch_add(1, Ordering::SeqCst);
            futex_wake(word, i32::MAX);
        }
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

    /// Reserves and claims the slots of a `payload_len` record and publishes nothing: what a
    /// producer killed mid-push leaves (tests, and `OutcomeRing._abandon` from Python).
    pub fn abandon(&self, payload_len: usize, claim: bool) -> Result<(), RingError> {
        let k = self.slots_for(payload_len)?;
        let pos = self.try_reserve(k).ok_or(RingError::Timeout)?;
        if claim && self.claim(pos, own_pid()) {
            self.meta(pos).store(tag(pos) | k, Ordering::Relaxed);
        }
        Ok(())
    }

    #[cfg(test)]
    /// Forks a child that reserves a `payload_len` record (claiming it when `claim`) and
    /// exits without publishing: a producer killed mid-push. Returns once it is reaped.
    pub(crate) fn die_mid_push(&self, payload_len: usize, claim: bool) {
        // SAFETY: the child only touches the shared ring and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = self.abandon(payload_len, claim).is_ok();
            // SAFETY: leave the child without running the parent's test harness.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(status, 0);
    }
}

/// Exclusive consumer access to a ring (see [`OutcomeRing::consumer`]).
pub struct Consumer<'a> {
    ring: &'a OutcomeRing,
    state: MutexGuard<'a, ConsumerState>,
}

impl Consumer<'_> {
    /// Looks at the head without blocking, taking back a stalled position whose producer never
    /// claimed it or is gone (see the module docs).
    pub fn check_head(&mut self, now: Instant) -> Head {
        let ring = self.ring;
        loop {
            let h = ring.head();
            let s = ring.seq(h).load(Ordering::Acquire);
            if s == h + 1 {
                return Head::Ready;
            }
            if ring.word64(OFF_TAIL).load(Ordering::Acquire) <= h {
                self.state.stall = None;
                return Head::Empty;
            }
            let since = match self.state.stall {
                Some((p, seen, t)) if p == h && seen == s => t,
                _ => {
                    self.state.stall = Some((h, s, now));
                    now
                }
            };
            let due = since + ring.stall_timeout;
            if now < due {
                return Head::Pending(due);
            }
            let claimant = (s & CLAIMED != 0).then_some((s >> 32 & 0x7fff_ffff) as u32);
            if claimant.is_some_and(|pid| !process_gone(pid)) {
                // Alive but not done (stopped, or slow): its slots stay its own.
                self.state.stall = Some((h, s, now));
                return Head::Pending(now + ring.stall_timeout);
            }
            ring.skip_stalled(h, s);
            self.state.stall = None;
        }
    }

    /// Blocks until a record is ready at the head or `deadline` passes; true if ready.
    ///
    /// Takes back stalled head positions as [`Consumer::check_head`] does. Spins briefly,
    /// then sleeps on the futex: no core is burnt while the ring is idle.
    pub fn wait_ready(&mut self, deadline: Instant) -> bool {
        let ring = self.ring;
        let mut spins = 0;
        loop {
            let now = Instant::now();
            let wake_at = match self.check_head(now) {
                Head::Ready => return true,
                Head::Pending(at) => at.min(deadline),
                Head::Empty => deadline,
            };
            if now >= deadline {
                return false;
            }
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let sleeping = ring.word32(OFF_SLEEPING);
            let word = ring.word32(OFF_DATA_SEQ);
            sleeping.store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let seen = word.load(Ordering::SeqCst);
            if !ring.is_ready(ring.head()) {
                let left = wake_at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    futex_wait(word, seen, Some(left));
                }
            }
            sleeping.store(0, Ordering::Relaxed);
        }
    }

    /// Pops up to `max` ready records without blocking, handing each to `f` before its slots
    /// are freed. Stops early (leaving that record in the ring) if `f` fails.
    pub fn pop_ready<E>(
        &mut self,
        max: usize,
        mut f: impl FnMut(&RecordView<'_>) -> Result<(), E>,
    ) -> Result<usize, E> {
        let ring = self.ring;
        let cap = ring.capacity;
        let mut h = ring.head();
        let start = h;
        let mut n = 0;
        let mut result = Ok(());
        while n < max && ring.is_ready(h) {
            // Published implies claimed, and the claimant wrote meta right after its claim.
            let k = ring
                .record_slots(h)
                .expect("a published first slot names its record's slots");
            if let Err(e) = f(&RecordView {
                ring,
                pos: h,
                slots: k,
            }) {
                result = Err(e);
                break;
            }
            // Free in position order (producers check only the last slot they want).
            for j in 0..k {
                ring.seq(h + j).store(h + j + cap, Ordering::Release);
            }
            h += k;
            n += 1;
        }
        if h != start {
            ring.word64(OFF_HEAD).store(h, Ordering::Release);
            self.state.stall = None;
            ring.wake_producers();
        }
        result.map(|()| n)
    }

    /// Pops up to `max` ready records into owned values (tests and Rust callers).
    pub fn pop_owned(&mut self, max: usize) -> Vec<(Outcome, Vec<u8>)> {
        let mut out = Vec::new();
        let _ = self.pop_ready::<()>(max, |r| {
            let mut p = Vec::new();
            r.append_payload(&mut p);
            out.push((r.outcome(), p));
            Ok(())
        });
        out
    }
}

#[cfg(test)]
#[path = "ring_model.rs"]
mod model;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};
    use std::thread;

    fn rec(job_id: i64, run_lease: i64) -> Outcome {
        Outcome {
            job_id,
            run_lease,
            code: (job_id % 7) as u8,
            kind: (job_id % 1000) as u32,
            number: job_id as f64 * 0.5,
        }
    }

    fn payload_for(producer: i64, i: i64) -> Vec<u8> {
        let len = ((i * 37 + producer * 11) % 300) as usize;
        (0..len).map(|b| (b as i64 + i + producer) as u8).collect()
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn rejects_bad_arguments_naming_them() {
        let s = Duration::from_secs(2);
        for (cap, sb, name) in [
            (100, 128, "capacity"),
            (1, 128, "capacity"),
            (0, 128, "capacity"),
            (64, 100, "slot_bytes"),
            (64, 32, "slot_bytes"),
        ] {
            match OutcomeRing::new(cap, sb, s) {
                Err(RingError::InvalidArg(n, _)) => assert_eq!(n, name),
                other => panic!("expected InvalidArg for {cap}/{sb}, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn single_record_roundtrip_and_len() {
        let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
        assert_eq!(ring.pending_slots(), 0);
        ring.push(&rec(5, 9), b"hello", None).unwrap();
        assert_eq!(ring.pending_slots(), 1);
        let got = ring.consumer().unwrap().pop_owned(10);
        assert_eq!(got, vec![(rec(5, 9), b"hello".to_vec())]);
        assert_eq!(ring.pending_slots(), 0);
        assert!(ring.consumer().unwrap().pop_owned(10).is_empty());
    }

    #[test]
    fn multi_slot_records_wrap_around_the_ring() {
        let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
        // first slot holds 8 payload bytes, continuations 48 each.
        for round in 0..50i64 {
            let len = (round as usize * 13) % 200;
            let p: Vec<u8> = (0..len).map(|b| (b + round as usize) as u8).collect();
            ring.push(&rec(round, round), &p, None).unwrap();
            let got = ring.consumer().unwrap().pop_owned(1);
            assert_eq!(got, vec![(rec(round, round), p)], "round {round}");
        }
    }

    #[test]
    fn payload_larger_than_ring_is_rejected() {
        let ring = OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap();
        let max = ring.max_payload();
        assert_eq!(max, 8 + 3 * 48);
        assert!(ring.push(&rec(1, 1), &vec![1u8; max], None).is_ok());
        assert_eq!(ring.consumer().unwrap().pop_owned(1)[0].1.len(), max);
        assert!(matches!(
            ring.push(&rec(1, 1), &vec![1u8; max + 1], None),
            Err(RingError::TooLarge { .. })
        ));
    }

    #[test]
    fn full_ring_times_out_then_backpressure_completes() {
        let ring = Arc::new(OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap());
        for i in 0..4 {
            ring.push(&rec(i, 0), b"", None).unwrap();
        }
        assert!(!ring.try_push(&rec(9, 0), b"").unwrap());
        let t0 = Instant::now();
        let r = ring.push(
            &rec(9, 0),
            b"",
            Some(Instant::now() + Duration::from_millis(30)),
        );
        assert!(matches!(r, Err(RingError::Timeout)));
        assert!(t0.elapsed() >= Duration::from_millis(25));

        // A producer blocked on the full ring completes once the consumer frees space.
        let done = Arc::new(AtomicBool::new(false));
        let (r2, d2) = (Arc::clone(&ring), Arc::clone(&done));
        let producer = thread::spawn(move || {
            for i in 4..100 {
                r2.push(&rec(i, 0), b"x", None).unwrap();
            }
            d2.store(true, Ordering::SeqCst);
        });
        let mut seen = Vec::new();
        while seen.len() < 100 {
            if ring.consumer().unwrap().wait_ready(far()) {
                seen.extend(
                    ring.consumer()
                        .unwrap()
                        .pop_owned(3)
                        .into_iter()
                        .map(|(o, _)| o.job_id),
                );
            }
        }
        producer.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn concurrent_producers_deliver_each_record_once_in_order() {
        const PRODUCERS: i64 = 4;
        const PER: i64 = 20_000;
        let ring = Arc::new(OutcomeRing::new(256, 128, Duration::from_secs(2)).unwrap());
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || {
                    for i in 0..PER {
                        ring.push(&rec(p, i), &payload_for(p, i), None).unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0i64; PRODUCERS as usize];
        let mut total = 0;
        while total < PRODUCERS * PER {
            assert!(
                ring.consumer().unwrap().wait_ready(far()),
                "timed out at {total}"
            );
            for (o, p) in ring.consumer().unwrap().pop_owned(64) {
                let (prod, i) = (o.job_id, o.run_lease);
                assert_eq!(i, next[prod as usize], "producer {prod} out of order");
                assert_eq!(o, rec(prod, i));
                assert_eq!(p, payload_for(prod, i));
                next[prod as usize] += 1;
                total += 1;
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert!(next.iter().all(|&n| n == PER));
        assert_eq!(ring.skipped(), 0);
        assert!(ring.consumer().unwrap().pop_owned(1).is_empty());
    }

    #[test]
    fn tiny_ring_with_multi_slot_records_under_contention() {
        // Records of up to 7 slots in a 16-slot ring: constant wrap-around and full-ring waits.
        const PRODUCERS: i64 = 3;
        const PER: i64 = 5_000;
        let ring = Arc::new(OutcomeRing::new(16, 64, Duration::from_secs(5)).unwrap());
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || {
                    for i in 0..PER {
                        ring.push(&rec(p, i), &payload_for(p, i), None).unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0i64; PRODUCERS as usize];
        let mut total = 0;
        while total < PRODUCERS * PER {
            let mut c = ring.consumer().unwrap();
            assert!(c.wait_ready(far()), "timed out at {total}");
            for (o, p) in c.pop_owned(1 + total as usize % 5) {
                let (prod, i) = (o.job_id, o.run_lease);
                assert_eq!(i, next[prod as usize]);
                assert_eq!(p, payload_for(prod, i));
                next[prod as usize] += 1;
                total += 1;
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(ring.skipped(), 0);
    }

    #[test]
    fn wait_ready_times_out_on_empty_ring() {
        let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
        let t0 = Instant::now();
        assert!(!ring
            .consumer()
            .unwrap()
            .wait_ready(Instant::now() + Duration::from_millis(20)));
        assert!(t0.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn dead_claimant_is_skipped_with_all_its_slots() {
        let ring = OutcomeRing::new(8, 64, Duration::from_millis(50)).unwrap();
        ring.push(&rec(1, 1), b"a", None).unwrap();
        ring.die_mid_push(100, true); // 3 slots, claimed, never published
        ring.push(&rec(2, 2), b"b", None).unwrap();
        assert_eq!(ring.consumer().unwrap().pop_owned(10).len(), 1);
        // The dead claim blocks the head: not ready before the stall timeout.
        assert!(!ring
            .consumer()
            .unwrap()
            .wait_ready(Instant::now() + Duration::from_millis(10)));
        assert!(ring.consumer().unwrap().wait_ready(far()));
        assert_eq!(ring.skipped(), 1);
        let got = ring.consumer().unwrap().pop_owned(10);
        assert_eq!(got, vec![(rec(2, 2), b"b".to_vec())]);
        for i in 0..20 {
            ring.push(&rec(i, i), &[7u8; 30], None).unwrap();
            assert_eq!(ring.consumer().unwrap().pop_owned(1)[0].0, rec(i, i));
        }
    }

    #[test]
    fn unclaimed_dead_reservation_is_skipped_slot_by_slot() {
        let ring = OutcomeRing::new(8, 64, Duration::from_millis(30)).unwrap();
        ring.die_mid_push(40, false); // 2 slots, never claimed
        ring.push(&rec(2, 2), b"b", None).unwrap();
        assert!(ring.consumer().unwrap().wait_ready(far()));
        assert_eq!(
            ring.consumer().unwrap().pop_owned(10),
            vec![(rec(2, 2), b"b".to_vec())]
        );
        assert_eq!(ring.skipped(), 2);
    }

    /// A pause hook that holds the producer of `job_id` at `at`, once: it reports arriving
    /// on the returned receiver and waits for a message on the returned sender.
    fn hold(
        ring: &OutcomeRing,
        job_id: i64,
        at: Pause,
    ) -> (mpsc::Receiver<()>, mpsc::SyncSender<()>) {
        let (arrived_tx, arrived) = mpsc::sync_channel(1);
        let (resume, resume_rx) = mpsc::sync_channel::<()>(1);
        let once = Mutex::new(Some((arrived_tx, resume_rx)));
        ring.pause_at(move |point, rec| {
            if point == at && rec.job_id == job_id {
                if let Some((arrived_tx, resume_rx)) = once.lock().unwrap().take() {
                    arrived_tx.send(()).unwrap();
                    resume_rx.recv().unwrap();
                }
            }
        });
        (arrived, resume)
    }

    fn drain_all(ring: &OutcomeRing, n: usize) -> Vec<(Outcome, Vec<u8>)> {
        let mut got = Vec::new();
        while got.len() < n {
            let mut c = ring.consumer().unwrap();
            assert!(c.wait_ready(far()), "only {} of {n} records", got.len());
            got.extend(c.pop_owned(n));
        }
        got
    }

    #[test]
    fn a_paused_claimant_keeps_its_slot_and_overwrites_nothing() {
        // A producer paused between taking its slot and writing it, for longer
        // than the stall timeout, while the ring laps.
        let ring = Arc::new(OutcomeRing::new(2, 64, Duration::from_millis(20)).unwrap());
        let (arrived, resume) = hold(&ring, 111, Pause::Claimed);
        let r = Arc::clone(&ring);
        let paused = thread::spawn(move || r.push(&rec(111, 1), b"STALE!!!", None));
        arrived.recv().unwrap();
        assert!(!ring
            .consumer()
            .unwrap()
            .wait_ready(Instant::now() + Duration::from_millis(200)));
        assert_eq!(ring.skipped(), 0, "a live claimant's slot was taken back");
        ring.push(&rec(222, 2), b"b", None).unwrap();
        // The next lap needs the paused producer's slot: this push waits for it.
        let r = Arc::clone(&ring);
        let lapping = thread::spawn(move || r.push(&rec(333, 3), b"GOOD-333", None));
        resume.send(()).unwrap();
        paused.join().unwrap().unwrap();
        let mut got = drain_all(&ring, 2);
        lapping.join().unwrap().unwrap();
        got.extend(drain_all(&ring, 1));
        assert_eq!(
            got,
            vec![
                (rec(111, 1), b"STALE!!!".to_vec()),
                (rec(222, 2), b"b".to_vec()),
                (rec(333, 3), b"GOOD-333".to_vec()),
            ]
        );
    }

    #[test]
    fn an_unclaimed_reservation_is_taken_back_and_pushed_again() {
        let ring = Arc::new(OutcomeRing::new(4, 64, Duration::from_millis(20)).unwrap());
        let (arrived, resume) = hold(&ring, 111, Pause::Reserved);
        let r = Arc::clone(&ring);
        let paused = thread::spawn(move || r.push(&rec(111, 1), &[1u8; 100], None));
        arrived.recv().unwrap();
        ring.push(&rec(222, 2), b"b", None).unwrap();
        // The paused record's three unclaimed slots are taken back one stall each.
        assert_eq!(drain_all(&ring, 1), vec![(rec(222, 2), b"b".to_vec())]);
        assert_eq!(ring.skipped(), 3);
        resume.send(()).unwrap();
        paused.join().unwrap().unwrap();
        assert_eq!(drain_all(&ring, 1), vec![(rec(111, 1), vec![1u8; 100])]);
    }

    #[test]
    fn a_producer_killed_while_asleep_on_a_full_ring_leaves_no_waiter_behind() {
        let ring = OutcomeRing::new(2, 64, Duration::from_secs(2)).unwrap();
        ring.push(&rec(1, 1), b"", None).unwrap();
        ring.push(&rec(2, 2), b"", None).unwrap();
        // A producer that flagged itself asleep and never came back.
        ring.word32(OFF_WAITERS).store(1, Ordering::SeqCst);
        assert_eq!(ring.consumer().unwrap().pop_owned(1).len(), 1);
        assert_eq!(ring.word32(OFF_WAITERS).load(Ordering::SeqCst), 0);
    }

    #[test]
    fn payload_length_is_bounded_by_the_record_slots() {
        let ring = OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap();
        ring.push(&rec(1, 1), b"abc", None).unwrap();
        let p = ring.slot_ptr(0);
        // SAFETY: the record is published and the consumer is not reading it yet.
        unsafe { ptr::write(p.add(REC_PAYLOAD_LEN).cast::<u32>(), u32::MAX) };
        let got = ring.consumer().unwrap().pop_owned(1);
        assert_eq!(got[0].1.len(), 64 - FIRST_PAYLOAD);
    }

    #[test]
    fn second_consumer_thread_is_refused() {
        let ring = Arc::new(OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap());
        let r2 = Arc::clone(&ring);
        let (holding, held) = std::sync::mpsc::channel();
        let waiter = thread::spawn(move || {
            let mut consumer = r2.consumer().unwrap();
            holding.send(()).unwrap();
            consumer.wait_ready(far())
        });
        // The waiter says when it holds the consumer (probing the lock from here could
        // take it at the moment the waiter asks, and a waiter that had already given it
        // back would leave a probe spinning forever); it sleeps until the push below.
        held.recv().unwrap();
        assert!(matches!(ring.consumer(), Err(RingError::ConsumerBusy)));
        ring.push(&rec(1, 1), b"", None).unwrap();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn consumer_sleeps_and_is_woken_by_a_push() {
        let ring = Arc::new(OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap());
        let r2 = Arc::clone(&ring);
        let consumer = thread::spawn(move || {
            let t0 = Instant::now();
            let ok = r2.consumer().unwrap().wait_ready(far());
            (ok, t0.elapsed())
        });
        // Wait until the consumer advertises it sleeps, then push.
        while ring.word32(OFF_SLEEPING).load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
        ring.push(&rec(1, 1), b"", None).unwrap();
        let (ok, waited) = consumer.join().unwrap();
        assert!(ok);
        assert!(waited < Duration::from_secs(5));
    }
}
