//! Anonymous maps that ask the OS for transparent huge pages (2 MiB). The packed weights
//! live in them (decision 131), and the read-bandwidth probe reads from one (decision
//! 197), so the probe reads memory the way a decode reads its weights: a heap buffer of
//! 4 KiB pages costs a TLB miss, and under a hypervisor a two-dimensional page walk,
//! every 4 KiB, which a decode from huge pages does not pay.

use memmap2::MmapMut;

/// One transparent huge page.
pub(crate) const HUGE: usize = 2 << 20;

/// A zeroed anonymous map holding at least `bytes` from its first `HUGE`-aligned byte,
/// advised for huge pages, and that byte's offset. The advice is only a hint: where THP
/// is off or absent the map keeps plain pages.
pub(crate) fn map(bytes: usize) -> std::io::Result<(MmapMut, usize)> {
    let map = MmapMut::map_anon(bytes.next_multiple_of(HUGE) + HUGE)?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    let skip = map.as_ptr().align_offset(HUGE);
    Ok((map, skip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_holds_the_bytes_asked_for_from_an_aligned_start() {
        for bytes in [1, HUGE - 1, HUGE, 3 * HUGE + 5] {
            let (mut map, skip) = map(bytes).unwrap();
            assert!(skip < HUGE && map.len() - skip >= bytes, "{bytes}");
            assert_eq!(map[skip..].as_ptr() as usize % HUGE, 0);
            assert!(map.iter().all(|&b| b == 0));
            map[skip + bytes - 1] = 7;
        }
    }
}
