//! The consumer side of the ring: the single consumer's handle, its look at the head
//! (taking back positions whose producer stalled before claiming or is gone), the futex
//! wait for records, and popping them in place through a [`RecordView`].

use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::sync::{MutexGuard, TryLockError};
use std::time::Instant;

use super::process::process_gone;
use super::*;
use crate::shm::{futex_wait, futex_wake};

/// Consumer-local bookkeeping (not shared: there is exactly one consumer).
#[derive(Default)]
pub(super) struct ConsumerState {
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
