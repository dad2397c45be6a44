//! In-process collection of outcome records into column arrays for the committer.
//!
//! The committer applies a whole batch with one guarded statement, so what it needs is
//! columns, not per-job objects. [`Batcher`] accumulates records as columns (payloads in one
//! contiguous buffer) and says when a batch is due: when it holds `max_size` records, or when
//! its oldest record has waited `max_delay` (the bound on flush latency). [`Columns`] is the
//! taken batch with the set operations the committer needs: stale ids after a guarded
//! update, sub-batches, a split by outcome code.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::ring::Outcome;

/// A batch of outcome records, one vector per field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    pub ids: Vec<i64>,
    pub leases: Vec<i64>,
    pub codes: Vec<u8>,
    pub kinds: Vec<u32>,
    pub numbers: Vec<f64>,
    /// `payload_ends[i]` is the end offset of record `i`'s payload in `payload_data`.
    pub payload_ends: Vec<usize>,
    pub payload_data: Vec<u8>,
}

impl Columns {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Payload bytes of record `i` (empty when it has none).
    pub fn payload(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.payload_ends[i - 1] };
        &self.payload_data[start..self.payload_ends[i]]
    }

    /// Appends a record whose payload is written by `fill` into the payload buffer.
    pub fn push_with(&mut self, rec: &Outcome, fill: impl FnOnce(&mut Vec<u8>)) {
        self.ids.push(rec.job_id);
        self.leases.push(rec.run_lease);
        self.codes.push(rec.code);
        self.kinds.push(rec.kind);
        self.numbers.push(rec.number);
        fill(&mut self.payload_data);
        self.payload_ends.push(self.payload_data.len());
    }

    pub fn push(&mut self, rec: &Outcome, payload: &[u8]) {
        self.push_with(rec, |buf| buf.extend_from_slice(payload));
    }

    pub fn outcome(&self, i: usize) -> Outcome {
        Outcome {
            job_id: self.ids[i],
            run_lease: self.leases[i],
            code: self.codes[i],
            kind: self.kinds[i],
            number: self.numbers[i],
        }
    }

    /// Ids of this batch that are not in `applied` (the guarded update matched no row for
    /// them: stale attempts), in batch order.
    pub fn stale_ids(&self, applied: &[i64]) -> Vec<i64> {
        let applied: HashSet<i64> = applied.iter().copied().collect();
        self.ids
            .iter()
            .copied()
            .filter(|id| !applied.contains(id))
            .collect()
    }

    /// The records at `indices`, in that order. Panics on an out-of-range index (the Python
    /// wrapper checks first).
    pub fn select(&self, indices: &[usize]) -> Columns {
        let mut out = Columns::default();
        for &i in indices {
            out.push(&self.outcome(i), self.payload(i));
        }
        out
    }

    /// One sub-batch per outcome code, each in batch order.
    pub fn split_by_code(&self) -> BTreeMap<u8, Columns> {
        let mut out: BTreeMap<u8, Columns> = BTreeMap::new();
        for i in 0..self.len() {
            out.entry(self.codes[i])
                .or_default()
                .push(&self.outcome(i), self.payload(i));
        }
        out
    }
}

/// Collects records until a batch is due (size or age trigger).
///
/// `max_size` is the size trigger; `limit` (at least `max_size`) is the largest batch. The
/// gap between them is for a backlog: records already waiting when a batch falls due join
/// it, so a committer that falls behind commits larger batches, fewer commits for the same
/// records, instead of letting the backlog grow.
#[derive(Debug)]
pub struct Batcher {
    max_size: usize,
    limit: usize,
    max_delay: Duration,
    cols: Columns,
    oldest: Option<Instant>,
}

impl Batcher {
    pub fn new(max_size: usize, max_delay: Duration, limit: usize) -> Self {
        let max_size = max_size.max(1);
        Self {
            max_size,
            limit: limit.max(max_size),
            max_delay,
            cols: Columns::default(),
            oldest: None,
        }
    }

    pub fn max_size(&self) -> usize {
        self.max_size
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    pub fn len(&self) -> usize {
        self.cols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cols.is_empty()
    }

    pub fn push(&mut self, rec: &Outcome, payload: &[u8]) {
        self.push_with(rec, |buf| buf.extend_from_slice(payload));
    }

    pub fn push_with(&mut self, rec: &Outcome, fill: impl FnOnce(&mut Vec<u8>)) {
        if self.oldest.is_none() {
            self.oldest = Some(Instant::now());
        }
        self.cols.push_with(rec, fill);
    }

    /// Room left before the size trigger fires.
    pub fn room(&self) -> usize {
        self.max_size.saturating_sub(self.len())
    }

    /// Room left before the batch is as large as it may grow.
    pub fn headroom(&self) -> usize {
        self.limit.saturating_sub(self.len())
    }

    /// When the age trigger fires (None while empty).
    pub fn due_at(&self) -> Option<Instant> {
        self.oldest.map(|t| t + self.max_delay)
    }

    /// How long a consumer holding this forming batch may wait before it looks for more
    /// records: half the time the records still to come would take at the pace the batch
    /// has filled so far. Those to come are its room, or fewer where only `in_flight`
    /// jobs are yet to report (None: unknown). At least `least`; never past the due time.
    pub fn next_look(&self, now: Instant, in_flight: Option<usize>, least: Duration) -> Duration {
        let (Some(oldest), Some(due)) = (self.oldest, self.due_at()) else {
            return least;
        };
        let records = u32::try_from(self.len().max(1)).unwrap_or(u32::MAX);
        let per_record = now.saturating_duration_since(oldest) / records;
        let coming = in_flight.map_or(self.room(), |k| k.min(self.room()));
        let look = per_record.saturating_mul(u32::try_from(coming).unwrap_or(u32::MAX)) / 2;
        look.max(least).min(due.saturating_duration_since(now))
    }

    /// True when the batch is full or its oldest record has waited `max_delay`.
    pub fn ready_at(&self, now: Instant) -> bool {
        self.len() >= self.max_size || self.due_at().is_some_and(|d| now >= d)
    }

    pub fn ready(&self) -> bool {
        self.ready_at(Instant::now())
    }

    /// Everything collected so far (None if empty); the batcher starts over.
    pub fn take(&mut self) -> Option<Columns> {
        self.oldest = None;
        if self.cols.is_empty() {
            return None;
        }
        // Sized for the usual batch: one topped up past it by a backlog grows as it fills.
        let cap = self.max_size.min(4096);
        let mut next = Columns::default();
        next.ids.reserve(cap);
        next.leases.reserve(cap);
        next.codes.reserve(cap);
        next.kinds.reserve(cap);
        next.numbers.reserve(cap);
        next.payload_ends.reserve(cap);
        Some(std::mem::replace(&mut self.cols, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: i64, code: u8) -> Outcome {
        Outcome {
            job_id: id,
            run_lease: id + 100,
            code,
            kind: 3,
            number: 1.5,
        }
    }

    #[test]
    fn size_trigger() {
        let mut b = Batcher::new(3, Duration::from_secs(3600), 5);
        assert!(!b.ready());
        b.push(&rec(1, 0), b"");
        b.push(&rec(2, 0), b"x");
        assert!(!b.ready());
        assert_eq!((b.room(), b.headroom()), (1, 3));
        b.push(&rec(3, 0), b"yz");
        assert!(b.ready());
        assert_eq!((b.room(), b.headroom()), (0, 2));
        let cols = b.take().unwrap();
        assert_eq!(cols.ids, vec![1, 2, 3]);
        assert_eq!(cols.leases, vec![101, 102, 103]);
        assert_eq!(cols.payload(0), b"");
        assert_eq!(cols.payload(1), b"x");
        assert_eq!(cols.payload(2), b"yz");
        assert!(b.is_empty() && !b.ready());
        assert!(b.take().is_none());
    }

    #[test]
    fn limit_is_at_least_the_size_trigger() {
        let b = Batcher::new(8, Duration::from_secs(1), 2);
        assert_eq!((b.max_size(), b.limit()), (8, 8));
    }

    #[test]
    fn delay_trigger() {
        let mut b = Batcher::new(100, Duration::from_millis(5), 100);
        assert!(b.due_at().is_none());
        b.push(&rec(1, 0), b"");
        let due = b.due_at().unwrap();
        assert!(!b.ready_at(due - Duration::from_micros(1)));
        assert!(b.ready_at(due));
        // The oldest record sets the clock, later pushes do not reset it.
        b.push(&rec(2, 0), b"");
        assert_eq!(b.due_at(), Some(due));
        let _ = b.take();
        assert!(b.due_at().is_none());
    }

    #[test]
    fn the_next_look_follows_the_pace_the_batch_fills_at() {
        let least = Duration::from_millis(1);
        let mut b = Batcher::new(100, Duration::from_secs(1), 100);
        assert_eq!(b.next_look(Instant::now(), None, least), least);
        for id in 0..10 {
            b.push(&rec(id, 0), b"");
        }
        let oldest = b.due_at().unwrap() - Duration::from_secs(1);
        // 10 records in 10 ms: 90 more to fill it take about 90 ms; look in half that.
        let now = oldest + Duration::from_millis(10);
        assert_eq!(b.next_look(now, None, least), Duration::from_millis(45));
        // Only 4 jobs out: the batch may be all there is in 4 ms; look in 2.
        assert_eq!(b.next_look(now, Some(4), least), Duration::from_millis(2));
        // Nothing out, or a batch filling fast: look again soon.
        assert_eq!(b.next_look(now, Some(0), least), least);
        let fast = oldest + Duration::from_micros(10);
        assert_eq!(b.next_look(fast, None, least), least);
        // Never past the due time.
        let late = oldest + Duration::from_millis(990);
        assert_eq!(b.next_look(late, None, least), Duration::from_millis(10));
    }

    #[test]
    fn stale_select_split() {
        let mut c = Columns::default();
        for (id, code) in [(1, 2), (2, 1), (3, 2), (4, 0)] {
            c.push(&rec(id, code), &[id as u8; 2]);
        }
        assert_eq!(c.stale_ids(&[2, 4, 99]), vec![1, 3]);
        assert_eq!(c.stale_ids(&[]), vec![1, 2, 3, 4]);
        let s = c.select(&[3, 0]);
        assert_eq!(s.ids, vec![4, 1]);
        assert_eq!(s.payload(0), &[4, 4]);
        assert_eq!(s.payload(1), &[1, 1]);
        let split = c.split_by_code();
        assert_eq!(split.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(split[&2].ids, vec![1, 3]);
        assert_eq!(split[&2].payload(1), &[3, 3]);
        assert_eq!(split[&0].outcome(0), rec(4, 0));
    }
}
