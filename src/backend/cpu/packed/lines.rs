//! Where packed weights live: zeroed cache lines carved in order out of large anonymous
//! maps that ask the OS for transparent huge pages (2 MiB), so a decode's stream over
//! every weight crosses a page, and misses the TLB, 512 times less often (decision 131).
//! A weight packed as a heap `Vec` would sit in many small buffers that no 2 MiB page
//! can back. Where maps cannot be made, a plain `Vec` stands in.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use memmap2::MmapMut;

use super::CacheLine;
use crate::backend::cpu::huge_pages::{self, HUGE};

/// Bytes of one shared map (plus what its alignment leaves over): weights are carved
/// from it in order while they fit; one that does not starts the next map, sized for
/// it where it is larger than this.
const CHUNK: usize = 16 * HUGE;

/// An anonymous map, its first `HUGE`-aligned line and how many lines follow it there.
struct Chunk {
    _map: MmapMut,
    base: *mut CacheLine,
    lines: usize,
}

// SAFETY: `base` points into `_map`, which the chunk owns and never moves; the chunk
// itself gives no access to it (each `Lines` owns a disjoint range).
unsafe impl Send for Chunk {}
// SAFETY: as above.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A zeroed map with room for `lines` cache lines from a huge-page boundary,
    /// advised for huge pages (where the OS has them; plain pages otherwise).
    fn new(lines: usize) -> std::io::Result<Chunk> {
        let (mut map, skip) = huge_pages::map(lines * size_of::<CacheLine>())?;
        Ok(Chunk {
            // SAFETY: `skip < HUGE`, inside the map.
            base: unsafe { map.as_mut_ptr().add(skip) }.cast(),
            lines: (map.len() - skip) / size_of::<CacheLine>(),
            _map: map,
        })
    }
}

/// The chunk being carved and how many of its lines are taken.
static CURRENT: Mutex<Option<(Arc<Chunk>, usize)>> = Mutex::new(None);

/// `len` zeroed cache lines, owned: in a huge-page map, or on the heap.
pub(super) struct Lines(Storage);

enum Storage {
    Mapped {
        chunk: Arc<Chunk>,
        start: usize,
        len: usize,
    },
    Heap(Vec<CacheLine>),
}

impl Lines {
    /// `len` zeroed lines: from the current chunk while it has room, else from a new
    /// one (of their own size when they are larger than [`CHUNK`]).
    pub(super) fn zeroed(len: usize) -> Lines {
        if len == 0 {
            return Lines(Storage::Heap(Vec::new()));
        }
        let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((chunk, used)) = current.as_mut() {
            if chunk.lines - *used >= len {
                let start = *used;
                *used += len;
                return Lines(Storage::Mapped {
                    chunk: chunk.clone(),
                    start,
                    len,
                });
            }
        }
        let per_chunk = CHUNK / size_of::<CacheLine>();
        match Chunk::new(len.max(per_chunk)) {
            Ok(chunk) => {
                let chunk = Arc::new(chunk);
                if len < per_chunk {
                    *current = Some((chunk.clone(), len));
                }
                Lines(Storage::Mapped {
                    chunk,
                    start: 0,
                    len,
                })
            }
            Err(_) => Lines(Storage::Heap(vec![CacheLine([0; 64]); len])),
        }
    }
}

impl Deref for Lines {
    type Target = [CacheLine];

    fn deref(&self) -> &[CacheLine] {
        match &self.0 {
            // SAFETY: `start + len ≤ chunk.lines` (checked when carved), the chunk
            // outlives this borrow, and no other `Lines` holds these lines.
            Storage::Mapped { chunk, start, len } => unsafe {
                std::slice::from_raw_parts(chunk.base.add(*start), *len)
            },
            Storage::Heap(v) => v,
        }
    }
}

impl DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [CacheLine] {
        match &mut self.0 {
            // SAFETY: as in `deref`; `&mut self` makes this the only borrow of them.
            Storage::Mapped { chunk, start, len } => unsafe {
                std::slice::from_raw_parts_mut(chunk.base.add(*start), *len)
            },
            Storage::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines come zeroed, stay apart from each other's, and a weight larger than any
    /// shared map (a chunk and its alignment slack) starts a map of its own.
    #[test]
    fn carved_lines_are_zeroed_and_disjoint() {
        let mut a = Lines::zeroed(1000);
        let mut b = Lines::zeroed(3);
        let huge = (CHUNK + HUGE) / 64 + 1;
        let big = Lines::zeroed(huge);
        assert!(a
            .iter()
            .chain(b.iter())
            .chain(big.iter())
            .all(|l| l.0 == [0; 64]));
        a.iter_mut().for_each(|l| l.0 = [1; 64]);
        b.iter_mut().for_each(|l| l.0 = [2; 64]);
        assert!(a.iter().all(|l| l.0 == [1; 64]) && b.iter().all(|l| l.0 == [2; 64]));
        assert_eq!((a.len(), b.len(), big.len()), (1000, 3, huge));
        assert!(
            matches!(big.0, Storage::Mapped { start: 0, .. }),
            "a weight larger than any shared map starts a map of its own"
        );
        assert!(Lines::zeroed(0).is_empty());
    }
}
