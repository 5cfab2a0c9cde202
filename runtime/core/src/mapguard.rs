//! Read-only file maps that survive their file being truncated while they are read.
//!
//! A page of a memory map past the end of its file raises `SIGBUS` when touched: another
//! process truncating an input (a checkpoint rewritten in place while it is hashed) would
//! kill the reader. Every map [`Source::open`](crate::source::Source::open) makes is
//! registered here, in a fixed table of atomics that a `SIGBUS` handler reads: a fault
//! inside a registered map has anonymous zero pages mapped over the rest of the map
//! (`MAP_FIXED`, so the faulting read finishes, reading zeros) and the map flagged as
//! changed; the reader then reports "the file changed while it was read" instead of
//! dying ([`Mapping::changed`], checked by the high-level API after indexing and after
//! every read). A fault anywhere else goes to the handler that was installed before
//! (Rust's own stack-overflow handler, or the default action, which ends the process as
//! before). The handler is async-signal-safe: atomic loads and stores, `mmap`, and the
//! previous handler.
//!
//! Linux only; elsewhere maps are not guarded (a truncation still raises `SIGBUS`). A
//! program that installs its own `SIGBUS` handler after the first map replaces this one.
//! At most [`SLOTS`] maps are guarded at once; more are mapped unguarded.

use std::ops::Deref;

/// How many maps can be guarded at once.
pub const SLOTS: usize = 1024;

/// A read-only memory map of a file, guarded against the file shrinking while it is
/// read (see the module documentation).
pub struct Mapping {
    map: memmap2::Mmap,
    slot: Option<usize>,
}

impl Mapping {
    /// Guards `map` (when a slot is free and the platform allows).
    pub fn new(map: memmap2::Mmap) -> Self {
        let slot = imp::register(map.as_ptr() as usize, map.len());
        Mapping { map, slot }
    }

    /// True when a read of the map faulted because the file had shrunk: the bytes read
    /// since may be zeros in place of the file's, and must not be trusted.
    pub fn changed(&self) -> bool {
        self.slot.is_some_and(imp::changed)
    }

    /// True when the map is guarded.
    pub fn guarded(&self) -> bool {
        self.slot.is_some()
    }
}

impl Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            imp::unregister(slot);
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Once, OnceLock};

    use super::SLOTS;

    /// Each slot's map: its first byte's address (0: free) and its end.
    static START: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static END: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    /// Each slot's map faulted past its file's end.
    static CHANGED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
    /// The page size, read once before the handler is installed.
    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    static INSTALL: Once = Once::new();
    /// The handler installed before this one, called for faults outside our maps.
    static PREVIOUS: OnceLock<Previous> = OnceLock::new();
    /// Whether the handler is installed.
    static INSTALLED: AtomicBool = AtomicBool::new(false);

    struct Previous(libc::sigaction);
    // SAFETY: a plain C struct of a function address, flags and a signal set, only read.
    unsafe impl Sync for Previous {}
    unsafe impl Send for Previous {}

    pub(super) fn register(start: usize, len: usize) -> Option<usize> {
        if start == 0 || len == 0 {
            return None;
        }
        install();
        if !INSTALLED.load(Ordering::Acquire) {
            return None;
        }
        for (i, s) in START.iter().enumerate() {
            if s.load(Ordering::Relaxed) != 0 {
                continue;
            }
            // END first, so that a handler seeing START sees the END that goes with it.
            CHANGED[i].store(false, Ordering::Relaxed);
            END[i].store(start + len, Ordering::Release);
            if s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(i);
            }
        }
        None
    }

    pub(super) fn unregister(slot: usize) {
        START[slot].store(0, Ordering::Release);
    }

    pub(super) fn changed(slot: usize) -> bool {
        CHANGED[slot].load(Ordering::Acquire)
    }

    fn install() {
        INSTALL.call_once(|| {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            // SAFETY: sigaction structs zeroed then filled as sigaction(2) says; the
            // handler only does async-signal-safe work.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigbus as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                    return;
                }
                let _ = PREVIOUS.set(Previous(old));
                if libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) == 0 {
                    INSTALLED.store(true, Ordering::Release);
                }
            }
        });
    }

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        for i in 0..SLOTS {
            let start = START[i].load(Ordering::Acquire);
            if start == 0 || addr < start {
                continue;
            }
            let end = END[i].load(Ordering::Acquire);
            if addr >= end {
                continue;
            }
            let page = PAGE.load(Ordering::Relaxed);
            let from = addr & !(page - 1);
            // SAFETY: [from, end) lies inside a read-only map this module registered and
            // whose owner keeps it mapped; zero pages replace the file's there.
            let p = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                CHANGED[i].store(true, Ordering::Release);
                return;
            }
            break;
        }
        // Not ours: what would have happened without this handler.
        match PREVIOUS.get() {
            Some(Previous(prev))
                if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN =>
            {
                // SAFETY: the previous handler, called as the kernel would have called it.
                unsafe {
                    if prev.sa_flags & libc::SA_SIGINFO != 0 {
                        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                            std::mem::transmute(prev.sa_sigaction);
                        f(sig, info, ctx);
                    } else {
                        let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                        f(sig);
                    }
                }
            }
            _ => {
                // The default action: returning re-runs the faulting access, which now
                // ends the process as it would have.
                // SAFETY: signal(2) is async-signal-safe.
                unsafe {
                    libc::signal(libc::SIGBUS, libc::SIG_DFL);
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn register(_start: usize, _len: usize) -> Option<usize> {
        None
    }
    pub(super) fn unregister(_slot: usize) {}
    pub(super) fn changed(_slot: usize) -> bool {
        false
    }
}
