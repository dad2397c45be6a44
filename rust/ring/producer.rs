//! The producer side of the ring: reserving positions on the tail, claiming the first
//! slot, writing and publishing a record, waking the consumer, and waiting on a full ring.

use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::time::Instant;

use super::process::own_pid;
use super::*;
use crate::shm::{futex_wait, futex_wake};

impl OutcomeRing {
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
    pub(super) fn pause_at(&self, hook: impl Fn(Pause, &Outcome) + Send + Sync + 'static) {
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
