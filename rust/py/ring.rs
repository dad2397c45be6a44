//! `OutcomeRing`: the ring as a Python class, and the GIL-free drain of its records into a
//! `Batcher` (`drain_into`).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::batcher::PyBatcher;
use super::inflight::PyInFlight;
use super::{deadline, duration_arg, passed, slice_end, usize_arg};
use crate::batcher::Batcher;
use crate::inflight::InFlight;
use crate::ring::{Consumer, Outcome, OutcomeRing, RingError};

/// How often, at most, a consumer with a forming batch looks for more records.
const BATCH_POLL: Duration = Duration::from_millis(1);

fn ring_err(e: RingError) -> PyErr {
    let msg = e.to_string();
    match e {
        RingError::InvalidArg(..) | RingError::TooLarge { .. } => PyValueError::new_err(msg),
        RingError::Timeout => PyTimeoutError::new_err(msg),
        RingError::Skipped | RingError::ConsumerBusy => PyRuntimeError::new_err(msg),
        RingError::Os(_) => PyOSError::new_err(msg),
    }
}

/// Moves up to `max` ready records from the ring into the batcher.
fn move_into(consumer: &mut Consumer<'_>, batcher: &mut Batcher, max: usize) {
    let _ = consumer.pop_ready::<Infallible>(max, |r| {
        batcher.push_with(&r.outcome(), |buf| r.append_payload(buf));
        Ok(())
    });
}

/// Moves records into `b` until it is ready (see `drain_into`) or `until` passes.
///
/// Looks at the head on every round, the last included, so a caller that does not wait
/// (a committer flushing on stop) still gets a dead producer's slots taken back.
fn fill(
    c: &mut Consumer<'_>,
    ring: &OutcomeRing,
    b: &mut Batcher,
    until: Instant,
    table: Option<&InFlight>,
) -> bool {
    loop {
        let now = Instant::now();
        c.check_head(now);
        let room = b.room();
        move_into(c, b, room);
        if b.ready_at(now) {
            let headroom = b.headroom();
            move_into(c, b, headroom);
            return true;
        }
        let idle = table.is_some_and(|t| t.total_in_flight() == 0);
        if idle && !b.is_empty() && ring.pending_slots() == 0 {
            return true;
        }
        if now >= until {
            return false;
        }
        let wake = b.due_at().map_or(until, |d| d.min(until));
        if b.is_empty() {
            c.wait_ready(wake);
        } else {
            // A batch is forming and flushes at its deadline or size: poll instead of
            // advertising sleep, so producers do not pay a futex wake (and this thread a
            // wake-up) for every record. At the pace it fills, not every millisecond: each
            // wake-up takes a core from a handler.
            let in_flight = table.map(|t| usize::try_from(t.total_in_flight()).unwrap_or(0));
            let look = b.next_look(now, in_flight, BATCH_POLL);
            std::thread::sleep(wake.saturating_duration_since(now).min(look));
        }
    }
}

/// Multi-producer single-consumer ring of outcome records in anonymous shared memory.
///
/// Create it in the supervisor before forking workers: parent and children then share it.
/// Records are ``(job_id, run_lease, code, kind, number, payload)``; a payload that does not
/// fit in one slot spans several contiguous slots. A full ring applies backpressure (``push``
/// waits, GIL released), it never drops.
///
/// A producer that dies between reserving and publishing its slots cannot wedge the
/// consumer: a reserved slot still unpublished after ``stall_timeout`` seconds is skipped
/// (counted in ``skipped``) once its producer's process is gone. A producer that is only
/// paused keeps the slots it has taken, however long it is paused, and nobody else writes
/// them; one paused before taking them reserves again when it resumes.
///
/// Only one thread of one process may drain (``drain``/``drain_into``) at a time; a second
/// concurrent drainer in the same process gets ``RuntimeError``.
#[pyclass(name = "OutcomeRing", module = "awa_fast._core", frozen)]
pub struct PyOutcomeRing {
    ring: OutcomeRing,
}

impl PyOutcomeRing {
    /// Pops ready records straight from shared memory into Python tuples (one pass).
    fn pop_into(&self, py: Python<'_>, max: usize, list: &Bound<'_, PyList>) -> PyResult<usize> {
        let mut consumer = self.ring.consumer().map_err(ring_err)?;
        consumer.pop_ready(max, |r| {
            let o = r.outcome();
            let payload = PyBytes::new_with(py, r.payload_len(), |buf| {
                r.copy_payload(buf);
                Ok(())
            })?;
            list.append((o.job_id, o.run_lease, o.code, o.kind, o.number, payload))
        })
    }
}

#[pymethods]
impl PyOutcomeRing {
    #[new]
    #[pyo3(signature = (capacity = 65536, slot_bytes = 128, *, stall_timeout = 2.0))]
    fn new(capacity: i64, slot_bytes: i64, stall_timeout: f64) -> PyResult<Self> {
        let capacity = usize_arg("capacity", capacity)?;
        let slot_bytes = usize_arg("slot_bytes", slot_bytes)?;
        let stall = duration_arg("stall_timeout", stall_timeout)?;
        let ring = OutcomeRing::new(capacity, slot_bytes, stall).map_err(ring_err)?;
        Ok(Self { ring })
    }

    /// Pushes one record; waits (GIL released) while the ring is full.
    ///
    /// Raises TimeoutError if the ring stays full for ``timeout`` seconds (None: wait
    /// forever), ValueError if the payload is larger than the whole ring.
    #[pyo3(signature = (job_id, run_lease, code, kind, number, payload = &[] as &[u8], timeout = None))]
    #[allow(clippy::too_many_arguments)] // mirrors the record's fields; called from Python
    fn push(
        &self,
        py: Python<'_>,
        job_id: i64,
        run_lease: i64,
        code: u8,
        kind: u32,
        number: f64,
        payload: &[u8],
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let rec = Outcome {
            job_id,
            run_lease,
            code,
            kind,
            number,
        };
        if self.ring.try_push(&rec, payload).map_err(ring_err)? {
            return Ok(());
        }
        let deadline = deadline("timeout", timeout)?;
        loop {
            let until = slice_end(deadline);
            match py.detach(|| self.ring.push(&rec, payload, Some(until))) {
                Ok(()) => return Ok(()),
                Err(RingError::Timeout) if !passed(deadline) => py.check_signals()?,
                Err(e) => return Err(ring_err(e)),
            }
        }
    }

    /// Returns up to ``max_records`` ready records as
    /// ``(job_id, run_lease, code, kind, number, payload)`` tuples.
    ///
    /// Returns at once if any record is ready; otherwise sleeps on a futex (GIL released) until
    /// one arrives or ``timeout`` seconds pass, then returns ``[]``.
    fn drain<'py>(
        &self,
        py: Python<'py>,
        max_records: i64,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        let max = usize_arg("max_records", max_records)?;
        let list = PyList::empty(py);
        if max == 0 || self.pop_into(py, max, &list)? > 0 {
            return Ok(list);
        }
        let deadline = deadline("timeout", Some(timeout))?;
        loop {
            let until = slice_end(deadline);
            let ready = py
                .detach(|| self.ring.consumer().map(|mut c| c.wait_ready(until)))
                .map_err(ring_err)?;
            if ready && self.pop_into(py, max, &list)? > 0 {
                return Ok(list);
            }
            if passed(deadline) {
                return Ok(list);
            }
            py.check_signals()?;
        }
    }

    /// Moves ready records into ``batcher`` (GIL released throughout) until the batcher is
    /// ready (size or age trigger) or ``timeout`` seconds pass. Returns ``batcher.ready()``.
    ///
    /// With ``inflight``, a non-empty batch is also ready as soon as nothing is in flight
    /// in that table and the ring is empty: no further outcome is coming to share its
    /// commit, so waiting out the age trigger would only delay durability.
    ///
    /// Once the batch is ready, records already waiting in the ring join it, up to the
    /// batcher's ``limit``: behind a backlog, batches grow instead of the backlog. Never
    /// overfills: the batch holds at most ``limit`` records.
    #[pyo3(signature = (batcher, timeout, inflight = None))]
    fn drain_into(
        &self,
        py: Python<'_>,
        mut batcher: PyRefMut<'_, PyBatcher>,
        timeout: f64,
        inflight: Option<PyRef<'_, PyInFlight>>,
    ) -> PyResult<bool> {
        let deadline = deadline("timeout", Some(timeout))?;
        let table = inflight.as_deref().map(|f| &f.table);
        let b: &mut Batcher = &mut batcher.inner;
        loop {
            let until = slice_end(deadline);
            let b2 = &mut *b;
            let ready = py
                .detach(|| {
                    let mut c = self.ring.consumer()?;
                    Ok::<_, RingError>(fill(&mut c, &self.ring, b2, until, table))
                })
                .map_err(ring_err)?;
            if ready || passed(deadline) {
                return Ok(ready || b.ready());
            }
            py.check_signals()?;
        }
    }

    /// Test hook: reserves (and, with ``claim``, claims) the slots of a ``payload_len``
    /// record and publishes nothing, as a producer killed mid-push does.
    #[pyo3(signature = (payload_len, claim = true))]
    fn _abandon(&self, payload_len: i64, claim: bool) -> PyResult<()> {
        let len = usize_arg("payload_len", payload_len)?;
        self.ring.abandon(len, claim).map_err(ring_err)
    }

    /// Approximate number of pending records (reserved, not yet drained slots; exact when
    /// every payload fits in one slot).
    fn __len__(&self) -> usize {
        self.ring.pending_slots() as usize
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    #[getter]
    fn slot_bytes(&self) -> usize {
        self.ring.slot_bytes()
    }

    #[getter]
    fn stall_timeout(&self) -> f64 {
        self.ring.stall_timeout().as_secs_f64()
    }

    /// Records skipped: their producer died, or stalled before taking its slots.
    #[getter]
    fn skipped(&self) -> u64 {
        self.ring.skipped()
    }

    /// Largest payload one record can carry.
    #[getter]
    fn max_payload(&self) -> usize {
        self.ring.max_payload()
    }

    fn __repr__(&self) -> String {
        format!(
            "OutcomeRing(capacity={}, slot_bytes={}, pending={})",
            self.ring.capacity(),
            self.ring.slot_bytes(),
            self.ring.pending_slots()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_that_never_waits_still_gets_past_a_dead_producer() {
        // A stopping committer drains with timeout 0, again and again.
        let ring = OutcomeRing::new(8, 64, Duration::from_millis(30)).unwrap();
        ring.die_mid_push(10, true);
        let lost = Outcome {
            job_id: 7,
            run_lease: 1,
            code: 9,
            kind: 0,
            number: 0.0,
        };
        ring.push(&lost, b"lost", None).unwrap();
        let mut batch = Batcher::new(100, Duration::ZERO, 100);
        let give_up = Instant::now() + Duration::from_secs(10);
        while batch.is_empty() {
            assert!(
                Instant::now() < give_up,
                "the dead producer's slot was never skipped"
            );
            let mut c = ring.consumer().unwrap();
            fill(&mut c, &ring, &mut batch, Instant::now(), None);
        }
        assert_eq!(batch.take().unwrap().ids, vec![7]);
        assert_eq!((ring.skipped(), ring.pending_slots()), (1, 0));
    }
}
