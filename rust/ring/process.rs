//! Who holds a claim: the process id a producer claims slots with, and whether a claimant's
//! process is gone (the consumer takes a claimed record back only then).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// The process id a producer claims slots with, cached (`getpid` is a syscall).
pub(super) fn own_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    static FORGET_IN_CHILD: Once = Once::new();
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    #[cfg(test)]
    if let Some(pid) = fake_process::pid() {
        return pid;
    }
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    // SAFETY: registering an atfork child handler that only stores to an atomic (async-signal
    // safe); it keeps a forked child from claiming slots with its parent's pid.
    FORGET_IN_CHILD.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Whether process `pid` has exited (gone, or a zombie not reaped yet).
pub(super) fn process_gone(pid: u32) -> bool {
    #[cfg(test)]
    if let Some(gone) = fake_process::gone(pid) {
        return gone;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // A killed child keeps its pid until its parent reaps it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .is_some_and(|state| state == 'Z' || state == 'X')
}

/// Test doubles for process identity: a model-check thread claims slots under a pid of its own
/// and "dies" by having that pid marked gone.
#[cfg(test)]
pub(crate) mod fake_process {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// Above any real pid (`pid_max` is at most 2^22), below the 31 bits a claim holds.
    const BASE: u32 = 0x4000_0000;
    static NEXT: AtomicU32 = AtomicU32::new(BASE);
    static GONE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    std::thread_local!(static PID: Cell<Option<u32>> = const { Cell::new(None) });

    /// A fake pid nobody uses yet.
    pub fn fresh() -> u32 {
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes the calling thread claim slots as `pid`.
    pub fn assume(pid: u32) {
        PID.set(Some(pid));
    }

    pub fn pid() -> Option<u32> {
        PID.get()
    }

    pub fn kill(pid: u32) {
        GONE.lock().unwrap().push(pid);
    }

    /// Whether a fake pid is gone; `None` for a real one.
    pub fn gone(pid: u32) -> Option<bool> {
        (pid >= BASE).then(|| GONE.lock().unwrap().contains(&pid))
    }
}
