//! Capacity counters: a queue's units taken with `reserve` and given back with `release`,
//! and the tagged return of the unit an occupied slot holds (see "Capacity accounting" in
//! the module docs).

use std::sync::atomic::Ordering;

use super::*;

impl InFlight {
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
    pub(super) fn return_unit(&self, queue: usize, tag: u64) {
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
    pub(super) fn unit_returned(&self, queue: usize, tag: u64) -> bool {
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
}
