//! Thin PyO3 wrappers: argument checks, error mapping and GIL release around every wait.
//!
//! Fast paths (a push into a ring with room, a drain that finds records) run with the GIL held:
//! releasing and re-taking it costs more than the work. Anything that may block releases the
//! GIL and waits in slices of at most [`WAIT_SLICE`], re-taking the GIL between slices only to
//! run `check_signals()`, so Ctrl-C and signal handlers still work during a long wait.
//!
//! One file per Python class or group of functions: `ring.rs` (`OutcomeRing`), `batcher.rs`
//! (`Batcher`, `Batch`), `inflight.rs` (`InFlight`), `callback.rs` and `cel.rs` (functions).
//! This file holds the argument and deadline helpers they share.

mod batcher;
mod callback;
mod cel;
mod inflight;
mod ring;

pub use batcher::{PyBatch, PyBatcher};
pub use callback::{callback_sign, callback_verify};
pub use cel::{cel_evaluate, cel_variables};
pub use inflight::PyInFlight;
pub use ring::PyOutcomeRing;

use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Longest stretch spent without the GIL before checking for signals.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Timeouts beyond this are treated as "forever" (avoids Instant overflow).
const FOREVER_SECS: f64 = 1e9;

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

fn usize_arg(name: &'static str, v: i64) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{name}: must be >= 0, got {v}")))
}
