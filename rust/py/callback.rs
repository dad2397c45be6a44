//! `callback_sign` and `callback_verify`: callback signatures, as the Awa SDK computes them,
//! for Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::callback::{self, Secret, SECRET_LEN};

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
