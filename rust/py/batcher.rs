//! `Batcher` and `Batch`: the outcome batcher (`crate::batcher`) as Python classes.

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::duration_arg;
use crate::batcher::{Batcher, Columns};
use crate::ring::Outcome;

/// In-process collector of outcome records into columns, with a size and an age trigger.
#[pyclass(name = "Batcher", module = "awa_fast._core")]
pub struct PyBatcher {
    pub(super) inner: Batcher,
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
