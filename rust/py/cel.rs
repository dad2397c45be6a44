//! `cel_variables` and `cel_evaluate`: CEL callback expressions for Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

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
