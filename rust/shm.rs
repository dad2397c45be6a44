//! Anonymous shared memory and the Linux futex calls that wait on it.
//!
//! Every structure that the supervisor shares with its forked workers lives in one
//! `mmap(MAP_SHARED | MAP_ANONYMOUS)` region created *before* `fork()`: the child inherits the
//! mapping, so parent and children address the same physical pages with no file, no name and
//! nothing to clean up when the last process exits. Only atomics are placed in it (no pthread
//! mutexes): a worker can be SIGKILLed at any instruction and must never leave a lock held.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Alignment used to keep independently written words on separate cache lines.
pub const CACHE_LINE: usize = 64;

/// One anonymous `MAP_SHARED` mapping, zero-filled by the kernel, unmapped on drop.
///
/// Dropping it in one process unmaps only that process's view; the pages live on as long as
/// any process (parent or forked child) still maps them.
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; every concurrent access to it goes through atomics
// (or through data published by an atomic Release write and read after an Acquire load), which
// the owners (`ring`, `inflight`) guarantee.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` zeroed bytes shared with every process forked after this call.
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty shared mapping",
            ));
        }
        // SAFETY: plain anonymous mapping request; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, len })
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings are rejected by `new` (kept for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base address of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// A typed reference to a value at `offset`.
    ///
    /// # Safety
    /// `offset` must be aligned for `T`, `offset + size_of::<T>()` must lie inside the
    /// mapping, and `T` must be valid for an all-zero bit pattern and safe to share between
    /// processes (atomics, or plain data only touched under the owner's publication protocol).
    pub unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + std::mem::size_of::<T>() <= self.len);
        debug_assert_eq!(offset % std::mem::align_of::<T>(), 0);
        &*self.ptr.as_ptr().add(offset).cast::<T>()
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing borrows the map any more.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Rounds `n` up to a multiple of the cache line.
pub const fn cache_align(n: usize) -> usize {
    n.div_ceil(CACHE_LINE) * CACHE_LINE
}

/// Sleeps while `*word == expected`, for at most `timeout` (forever when `None`).
///
/// Non-private futex (no `FUTEX_PRIVATE_FLAG`): the word lives in a `MAP_SHARED` mapping and is
/// waited on and woken from different processes. Returns on wake, timeout, signal or a value
/// mismatch alike; callers always re-check their condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts;
    let ts_ptr = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => std::ptr::null(),
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only
    // reads it. EAGAIN/ETIMEDOUT/EINTR are all fine outcomes here.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes up to `n` waiters sleeping on `word` in any process.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not dereference anything else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn mapping_is_zeroed_and_writable() {
        let map = SharedMap::new(4096).unwrap();
        assert_eq!(map.len(), 4096);
        assert!(!map.is_empty());
        // SAFETY: offset 64 is aligned and in bounds.
        let word: &AtomicU64 = unsafe { map.at(64) };
        assert_eq!(word.load(Ordering::Relaxed), 0);
        word.store(7, Ordering::Relaxed);
        assert_eq!(word.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn empty_mapping_is_rejected() {
        assert!(SharedMap::new(0).is_err());
    }

    #[test]
    fn mapping_is_shared_with_a_forked_child() {
        let map = SharedMap::new(4096).unwrap();
        // SAFETY: aligned, in bounds.
        let word: &AtomicU64 = unsafe { map.at(0) };
        // SAFETY: the child only does an atomic store and _exit (async-signal-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            word.store(42, Ordering::Release);
            // SAFETY: leave the child without running the parent's test harness.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(word.load(Ordering::Acquire), 42);
    }

    #[test]
    fn futex_times_out_and_wakes() {
        let map = Arc::new(SharedMap::new(4096).unwrap());
        let t0 = Instant::now();
        // SAFETY: aligned, in bounds.
        let word: &AtomicU32 = unsafe { map.at(0) };
        futex_wait(word, 0, Some(Duration::from_millis(20)));
        assert!(t0.elapsed() >= Duration::from_millis(15));
        // Value mismatch returns immediately.
        futex_wait(word, 1, None);

        let m2 = Arc::clone(&map);
        let waiter = std::thread::spawn(move || {
            // SAFETY: aligned, in bounds.
            let w: &AtomicU32 = unsafe { m2.at(0) };
            while w.load(Ordering::Acquire) == 0 {
                futex_wait(w, 0, Some(Duration::from_secs(10)));
            }
        });
        word.store(1, Ordering::Release);
        futex_wake(word, 1);
        waiter.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
