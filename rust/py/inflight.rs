//! `InFlight`: the in-flight table as a Python class.

use pyo3::exceptions::{PyIndexError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use super::usize_arg;
use crate::inflight::{InFlight, InFlightError, SlotInfo};

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

/// `(job_id, run_lease, queue, worker, cancelled)` as returned to Python.
type SlotTuple = (i64, i64, u32, u32, bool);

/// Per-queue capacity counters and per-attempt slots in anonymous shared memory.
///
/// Create it before forking. ``reserve`` takes capacity units before claiming jobs; an
/// occupied slot holds one unit of its queue, given back by ``release_slot`` or
/// ``release_worker``; units reserved but not used are returned with ``release``.
#[pyclass(name = "InFlight", module = "awa_fast._core", frozen)]
pub struct PyInFlight {
    pub(super) table: InFlight,
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
