//! `awa_fast._core`: the parts of awa-fast that must be fast and shared between processes.
//!
//! See `awa_fast/_core.pyi` for the Python API; each module documents its own design.

pub mod batcher;
pub mod callback;
pub mod cel;
pub mod inflight;
pub mod py;
pub mod ring;
pub mod shm;

use pyo3::prelude::*;

/// The export list of the native module.
#[pymodule]
#[pyo3(name = "_core")]
fn awa_fast_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<py::PyOutcomeRing>()?;
    m.add_class::<py::PyInFlight>()?;
    m.add_class::<py::PyBatcher>()?;
    m.add_class::<py::PyBatch>()?;
    m.add_function(wrap_pyfunction!(py::callback_sign, m)?)?;
    m.add_function(wrap_pyfunction!(py::callback_verify, m)?)?;
    m.add_function(wrap_pyfunction!(py::cel_variables, m)?)?;
    m.add_function(wrap_pyfunction!(py::cel_evaluate, m)?)?;
    Ok(())
}
