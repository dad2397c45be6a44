//! Thin PyO3 wrappers: argument checks, error mapping and GIL release around every wait.
//!
//! Fast paths (a push into a ring with room, a drain that finds records) run with the GIL held:
//! releasing and re-taking it costs more than the work. Anything that may block releases the
//! GIL and waits in slices of at most [`WAIT_SLICE`], re-taking the GIL between slices only to
//! run `check_signals()`, so Ctrl-C and signal handlers still work during a long wait.

use std::convert::Infallible;
use std::time::{Duration, Instant};

/// How often, at most, a consumer with a forming batch looks for more records.
const BATCH_POLL: Duration = Duration::from_millis(1);

use pyo3::exceptions::{PyIndexError, PyOSError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::batch::{Batcher, Columns};
use crate::callback::{self, Secret, SECRET_LEN};
use crate::inflight::{InFlight, InFlightError, SlotInfo};
use crate::ring::{Consumer, Outcome, OutcomeRing, RingError};

/// Longest stretch spent without the GIL before checking for signals.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Timeouts beyond this are treated as "forever" (avoids Instant overflow).
const FOREVER_SECS: f64 = 1e9;

fn ring_err(e: RingError) -> PyErr {
    let msg = e.to_string();
    match e {
        RingError::InvalidArg(..) | RingError::TooLarge { .. } => PyValueError::new_err(msg),
        RingError::Timeout => PyTimeoutError::new_err(msg),
        RingError::Skipped | RingError::ConsumerBusy => PyRuntimeError::new_err(msg),
        RingError::Os(_) => PyOSError::new_err(msg),
    }
}

fn inflight_err(e: InFlightError) -> PyErr {
    let msg = e.to_string();
    match e {
        InFlightError::InvalidArg(..) | InFlightError::OverRelease { .. } => {
            PyValueError::new_err(msg)
        }
        InFlightError::Index(..) => PyIndexError::new_err(msg),
        InFlightError::Full => PyRuntimeError::new_err(msg),
        InFlightError::Os(_) => PyOSError::new_err(msg),
    }
}

/// Seconds from Python into a deadline; `None` (or a huge value) means no deadline.
fn deadline(name: &str, timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() => Err(PyValueError::new_err(format!("{name}: must not be NaN"))),
        Some(t) if t >= FOREVER_SECS => Ok(None),
        Some(t) => Ok(Some(Instant::now() + Duration::from_secs_f64(t.max(0.0)))),
    }
}

/// The end of the next GIL-free wait slice.
fn slice_end(deadline: Option<Instant>) -> Instant {
    let slice = Instant::now() + WAIT_SLICE;
    deadline.map_or(slice, |d| d.min(slice))
}

fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

fn duration_arg(name: &str, secs: f64) -> PyResult<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name}: must be a finite number of seconds >= 0, got {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
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

fn usize_arg(name: &'static str, v: i64) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{name}: must be >= 0, got {v}")))
}

// ------------------------------------------------------------------------- OutcomeRing

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

// ------------------------------------------------------------------------- Batcher / Batch

/// In-process collector of outcome records into columns, with a size and an age trigger.
#[pyclass(name = "Batcher", module = "awa_fast._core")]
pub struct PyBatcher {
    inner: Batcher,
}

#[pymethods]
impl PyBatcher {
    #[new]
    #[pyo3(signature = (max_size = 256, max_delay = 0.002, *, limit = None))]
    fn new(max_size: i64, max_delay: f64, limit: Option<i64>) -> PyResult<Self> {
        if max_size < 1 {
            return Err(PyValueError::new_err(format!(
                "max_size: must be >= 1, got {max_size}"
            )));
        }
        let limit = limit.unwrap_or(max_size);
        if limit < max_size {
            return Err(PyValueError::new_err(format!(
                "limit: must be >= max_size ({max_size}), got {limit}"
            )));
        }
        let delay = duration_arg("max_delay", max_delay)?;
        Ok(Self {
            inner: Batcher::new(max_size as usize, delay, limit as usize),
        })
    }

    #[pyo3(signature = (job_id, run_lease, code, kind, number, payload = &[] as &[u8]))]
    #[allow(clippy::too_many_arguments)] // mirrors the record's fields; called from Python
    fn push(
        &mut self,
        job_id: i64,
        run_lease: i64,
        code: u8,
        kind: u32,
        number: f64,
        payload: &[u8],
    ) {
        let rec = Outcome {
            job_id,
            run_lease,
            code,
            kind,
            number,
        };
        self.inner.push(&rec, payload);
    }

    /// True when ``len >= max_size`` or the oldest record is older than ``max_delay``.
    fn ready(&self) -> bool {
        self.inner.ready()
    }

    /// Everything collected (None when empty); the batcher starts over.
    fn take(&mut self) -> Option<PyBatch> {
        self.inner.take().map(|cols| PyBatch { cols })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn max_size(&self) -> usize {
        self.inner.max_size()
    }

    #[getter]
    fn limit(&self) -> usize {
        self.inner.limit()
    }

    #[getter]
    fn max_delay(&self) -> f64 {
        self.inner.max_delay().as_secs_f64()
    }
}

/// An immutable batch of outcome records as columns.
///
/// Each column property builds a new Python list in one pass over the batch (cache it in a
/// local if used twice).
#[pyclass(name = "Batch", module = "awa_fast._core", frozen)]
pub struct PyBatch {
    cols: Columns,
}

#[pymethods]
impl PyBatch {
    #[getter]
    fn ids(&self) -> Vec<i64> {
        self.cols.ids.clone()
    }

    #[getter]
    fn leases(&self) -> Vec<i64> {
        self.cols.leases.clone()
    }

    #[getter]
    fn codes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        // Vec<u8> would become bytes; the committer wants a list of ints.
        PyList::new(py, self.cols.codes.iter().map(|&c| c as u32))
    }

    #[getter]
    fn kinds(&self) -> Vec<u32> {
        self.cols.kinds.clone()
    }

    #[getter]
    fn numbers(&self) -> Vec<f64> {
        self.cols.numbers.clone()
    }

    /// Payload bytes per record, None where a record has no payload.
    #[getter]
    fn payloads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for i in 0..self.cols.len() {
            let p = self.cols.payload(i);
            if p.is_empty() {
                list.append(py.None())?;
            } else {
                list.append(PyBytes::new(py, p))?;
            }
        }
        Ok(list)
    }

    fn __len__(&self) -> usize {
        self.cols.len()
    }

    /// Ids of this batch NOT in ``applied_ids`` (stale attempts), in batch order.
    fn settle(&self, applied_ids: Vec<i64>) -> Vec<i64> {
        self.cols.stale_ids(&applied_ids)
    }

    /// The sub-batch at ``indices`` (in that order); IndexError when one is out of range.
    fn select(&self, indices: Vec<i64>) -> PyResult<PyBatch> {
        let n = self.cols.len();
        let idx = indices
            .iter()
            .map(|&i| {
                usize::try_from(i).ok().filter(|&u| u < n).ok_or_else(|| {
                    PyIndexError::new_err(format!("batch index {i} out of range ({n})"))
                })
            })
            .collect::<PyResult<Vec<usize>>>()?;
        Ok(PyBatch {
            cols: self.cols.select(&idx),
        })
    }

    /// One sub-batch per outcome code.
    fn split_by_code(&self) -> std::collections::BTreeMap<u8, PyBatch> {
        self.cols
            .split_by_code()
            .into_iter()
            .map(|(code, cols)| (code, PyBatch { cols }))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("Batch(len={})", self.cols.len())
    }
}

// ------------------------------------------------------------------------- InFlight

/// `(job_id, run_lease, queue, worker, cancelled)` as returned to Python.
type SlotTuple = (i64, i64, u32, u32, bool);

/// Per-queue capacity counters and per-attempt slots in anonymous shared memory.
///
/// Create it before forking. ``reserve`` takes capacity units before claiming jobs; an
/// occupied slot holds one unit of its queue, given back by ``release_slot`` or
/// ``release_worker``; units reserved but not used are returned with ``release``.
#[pyclass(name = "InFlight", module = "awa_fast._core", frozen)]
pub struct PyInFlight {
    table: InFlight,
}

impl PyInFlight {
    fn q(&self, queue: i64) -> PyResult<usize> {
        self.table.queue_index(queue).map_err(inflight_err)
    }

    fn s(&self, slot: i64) -> PyResult<usize> {
        self.table.slot_index(slot).map_err(inflight_err)
    }
}

#[pymethods]
impl PyInFlight {
    #[new]
    fn new(capacities: Vec<i64>, slots: i64) -> PyResult<Self> {
        let slots = usize_arg("slots", slots)?;
        let table = InFlight::new(&capacities, slots).map_err(inflight_err)?;
        Ok(Self { table })
    }

    /// Takes up to ``want`` free units of ``queue``; returns how many were granted.
    fn reserve(&self, queue: i64, want: i64) -> PyResult<i64> {
        let q = self.q(queue)?;
        if want < 0 {
            return Err(PyValueError::new_err(format!(
                "want: must be >= 0, got {want}"
            )));
        }
        Ok(self.table.reserve(q, want))
    }

    /// Returns ``n`` units of ``queue``; ValueError if more than are in flight.
    #[pyo3(signature = (queue, n = 1))]
    fn release(&self, queue: i64, n: i64) -> PyResult<()> {
        let q = self.q(queue)?;
        self.table.release(q, n).map_err(inflight_err)
    }

    fn in_flight(&self, queue: i64) -> PyResult<i64> {
        Ok(self.table.in_flight(self.q(queue)?))
    }

    fn capacity(&self, queue: i64) -> PyResult<i64> {
        Ok(self.table.capacity(self.q(queue)?))
    }

    fn free(&self, queue: i64) -> PyResult<i64> {
        Ok(self.table.free(self.q(queue)?))
    }

    fn set_capacity(&self, queue: i64, cap: i64) -> PyResult<()> {
        let q = self.q(queue)?;
        self.table.set_capacity(q, cap).map_err(inflight_err)
    }

    /// Occupies a slot for an attempt; RuntimeError "in-flight table full" if none is free.
    fn acquire_slot(
        &self,
        job_id: i64,
        run_lease: i64,
        queue: i64,
        worker: u32,
    ) -> PyResult<usize> {
        let q = self.q(queue)?;
        self.table
            .acquire_slot(job_id, run_lease, q, worker)
            .map_err(inflight_err)
    }

    /// Frees a slot and returns its queue unit; False if it was not occupied.
    fn release_slot(&self, slot: i64) -> PyResult<bool> {
        Ok(self.table.release_slot(self.s(slot)?))
    }

    /// ``(job_id, run_lease, queue, worker, cancelled)`` of an occupied slot, else None.
    fn slot_info(&self, slot: i64) -> PyResult<Option<SlotTuple>> {
        Ok(self
            .table
            .slot_info(self.s(slot)?)
            .map(|i| (i.job_id, i.run_lease, i.queue, i.worker, i.cancelled)))
    }

    /// Sets the cancel flag of the slot(s) running ``job_id`` (with ``run_lease`` if given).
    #[pyo3(signature = (job_id, run_lease = None))]
    fn cancel(&self, job_id: i64, run_lease: Option<i64>) -> bool {
        self.table.cancel(job_id, run_lease) > 0
    }

    fn is_cancelled(&self, slot: i64) -> PyResult<bool> {
        Ok(self.table.is_cancelled(self.s(slot)?))
    }

    /// Marks ``slot``'s attempt started, just before its handler runs.
    fn mark_started(&self, slot: i64) -> PyResult<()> {
        self.table.mark_started(self.s(slot)?);
        Ok(())
    }

    /// Flags every slot of ``worker``; returns how many.
    fn cancel_worker(&self, worker: u32) -> usize {
        self.table.cancel_worker(worker)
    }

    /// ``(ids, leases)`` of every occupied slot (one heartbeat UPDATE for all).
    fn running(&self) -> (Vec<i64>, Vec<i64>) {
        self.table
            .occupied()
            .into_iter()
            .map(|i| (i.job_id, i.run_lease))
            .unzip()
    }

    /// ``(job_id, run_lease, queue, started)`` of every occupied slot: an attempt whose
    /// handler runs, or (not started) a prefetched job waiting in its worker.
    fn attempts(&self) -> Vec<(i64, i64, u32, bool)> {
        self.table
            .occupied()
            .into_iter()
            .map(|i| (i.job_id, i.run_lease, i.queue, i.started))
            .collect()
    }

    /// ``(job_id, run_lease)`` of every slot held by ``worker``.
    fn held_by(&self, worker: u32) -> Vec<(i64, i64)> {
        self.table
            .occupied()
            .into_iter()
            .filter(|i| i.worker == worker)
            .map(|i| (i.job_id, i.run_lease))
            .collect()
    }

    /// Frees every slot of a dead ``worker`` and returns ``(job_id, run_lease, queue,
    /// started)`` of each, giving their queue units back.
    fn release_worker(&self, worker: u32) -> Vec<(i64, i64, u32, bool)> {
        self.table
            .release_worker(worker)
            .into_iter()
            .map(|i: SlotInfo| (i.job_id, i.run_lease, i.queue, i.started))
            .collect()
    }

    #[getter]
    fn queue_count(&self) -> usize {
        self.table.queue_count()
    }

    #[getter]
    fn slot_count(&self) -> usize {
        self.table.slot_count()
    }

    fn __repr__(&self) -> String {
        format!(
            "InFlight(queues={}, slots={})",
            self.table.queue_count(),
            self.table.slot_count()
        )
    }
}

// ------------------------------------------------------------------------- callback signatures

/// `secret` as a key. `awa_fast.callback_contract` checks it first with the error users see;
/// this keeps the native functions safe to call on their own.
fn secret_arg(secret: &[u8]) -> PyResult<&Secret> {
    secret.try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "secret: must be exactly {SECRET_LEN} bytes, got {}",
            secret.len()
        ))
    })
}

/// The signature of ``callback_id`` under ``secret``: 64 lowercase hex digits.
#[pyfunction]
pub fn callback_sign(secret: &[u8], callback_id: &str) -> PyResult<String> {
    Ok(callback::sign(secret_arg(secret)?, callback_id))
}

/// Whether ``signature`` is the hex (either case) of ``callback_id``'s signature; compared
/// in constant time.
#[pyfunction]
pub fn callback_verify(secret: &[u8], callback_id: &str, signature: &str) -> PyResult<bool> {
    Ok(callback::verify(
        secret_arg(secret)?,
        callback_id,
        signature,
    ))
}

// ------------------------------------------------------------------------- CEL

/// The variables a CEL expression references, sorted (``ValueError`` if it does not parse):
/// ``register_callback`` refuses an expression that uses any but ``payload``.
#[pyfunction]
pub fn cel_variables(expression: &str) -> PyResult<Vec<String>> {
    crate::cel::variables(expression).map_err(PyValueError::new_err)
}

/// A CEL expression evaluated with ``payload`` (JSON text) bound to ``payload``, as JSON text;
/// ``ValueError`` if it does not parse or evaluate, or yields a value JSON cannot hold.
#[pyfunction]
pub fn cel_evaluate(expression: &str, payload: &str) -> PyResult<String> {
    crate::cel::evaluate(expression, payload).map_err(PyValueError::new_err)
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
