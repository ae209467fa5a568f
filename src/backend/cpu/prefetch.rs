//! Asking the caches for memory a kernel reads soon. A prefetch is a hint: it reads
//! nothing and never faults, whatever the address, so addresses past a slice's end
//! are fine; on CPUs without the instruction these ask for nothing.

/// Asks for the cache line holding `p`.
#[inline(always)]
pub(crate) fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for every line of the `len` bytes from `start`: its first byte, every 64th
/// after it and its last. Plain pointer arithmetic: an indexed, checked walk cost more
/// than it saved in attention's loops (decision 105).
#[inline(always)]
pub(crate) fn span(start: *const u8, len: usize) {
    let mut at = 0;
    while at < len {
        line(start.wrapping_add(at));
        at += 64;
    }
    if len > 0 {
        line(start.wrapping_add(len - 1));
    }
}
