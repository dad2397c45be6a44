//! Attempt slots: acquiring and releasing them, cancel flags, consistent snapshots, and
//! freeing every slot of a dead worker (see "Slot state word" in the module docs).

use std::sync::atomic::{fence, Ordering};

use super::*;

impl InFlight {
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
    pub(super) fn begin_release(
        &self,
        slot: usize,
        pred: impl Fn(u64) -> bool,
    ) -> Option<(u64, SlotInfo)> {
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
}
