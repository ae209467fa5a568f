//! One layer's keys or values, stored in blocks of [`KV_BLOCK`] positions allocated as
//! positions are written, so a sequence's cache holds memory for the tokens it holds,
//! not for its whole context. Blocks are shared by reference count: a fork of a
//! sequence's first positions (a cached prompt prefix) copies no values, and a shared
//! block is copied only when one of its sharers writes into it.

use std::sync::Arc;

use half::f16;

use super::{BackendError, KvDType};

/// Positions per block.
pub const KV_BLOCK: usize = 32;

/// The blocks of a [`KvRows`], each `[KV_BLOCK, width]` in the storage type.
#[derive(Clone, Debug)]
pub enum KvBlocks {
    /// Half-precision blocks.
    F16(Vec<Arc<Vec<f16>>>),
    /// Single-precision blocks.
    F32(Vec<Arc<Vec<f32>>>),
}

/// One layer's keys or values: `width` values per position, at most `capacity`
/// positions.
#[derive(Clone, Debug)]
pub struct KvRows {
    width: usize,
    capacity: usize,
    blocks: KvBlocks,
}

impl KvRows {
    /// Empty rows: no block is allocated until a position is written.
    pub(super) fn new(dtype: KvDType, width: usize, capacity: usize) -> KvRows {
        let blocks = match dtype {
            KvDType::F16 => KvBlocks::F16(Vec::new()),
            KvDType::F32 => KvBlocks::F32(Vec::new()),
        };
        KvRows {
            width,
            capacity,
            blocks,
        }
    }

    /// Values per position.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The blocks written so far.
    pub fn blocks(&self) -> &KvBlocks {
        &self.blocks
    }

    /// Stores whole positions of `values` from `position` on, converting to the storage
    /// type and allocating blocks as needed.
    pub fn write(&mut self, position: usize, values: &[f32]) -> Result<(), BackendError> {
        let count = values.len() / self.width.max(1);
        let end = position + count;
        if values.len() != count * self.width || end > self.capacity {
            return Err(BackendError::KvCache(format!(
                "{} values at position {position} are not whole positions of {} within {}",
                values.len(),
                self.width,
                self.capacity
            )));
        }
        let width = self.width;
        let mut pos = position;
        for chunk in chunks_by_block(position, values, width) {
            let (block, at) = (pos / KV_BLOCK, (pos % KV_BLOCK) * width);
            match &mut self.blocks {
                KvBlocks::F16(blocks) => {
                    use half::slice::HalfFloatSliceExt;
                    grow(blocks, block, width, f16::ZERO);
                    Arc::make_mut(&mut blocks[block])[at..at + chunk.len()]
                        .convert_from_f32_slice(chunk);
                }
                KvBlocks::F32(blocks) => {
                    grow(blocks, block, width, 0.0);
                    Arc::make_mut(&mut blocks[block])[at..at + chunk.len()].copy_from_slice(chunk);
                }
            }
            pos += chunk.len() / width.max(1);
        }
        Ok(())
    }

    /// Positions `0..len` as `f32`, position-major.
    pub fn read_f32(&self, len: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(len * self.width);
        let mut left = len * self.width;
        let blocks: Box<dyn Iterator<Item = Vec<f32>>> = match &self.blocks {
            KvBlocks::F16(b) => Box::new(b.iter().map(|b| b.iter().map(|v| v.to_f32()).collect())),
            KvBlocks::F32(b) => Box::new(b.iter().map(|b| b.to_vec())),
        };
        for block in blocks {
            let take = left.min(block.len());
            out.extend_from_slice(&block[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        out
    }

    /// Rows sharing the blocks that hold positions `0..len` (no values are copied).
    pub fn fork(&self, len: usize) -> KvRows {
        let keep = len.div_ceil(KV_BLOCK);
        let blocks = match &self.blocks {
            KvBlocks::F16(b) => KvBlocks::F16(b.iter().take(keep).cloned().collect()),
            KvBlocks::F32(b) => KvBlocks::F32(b.iter().take(keep).cloned().collect()),
        };
        KvRows { blocks, ..*self }
    }

    /// Bytes of the allocated blocks.
    pub(super) fn bytes(&self) -> usize {
        match &self.blocks {
            KvBlocks::F16(b) => b.len() * KV_BLOCK * self.width * 2,
            KvBlocks::F32(b) => b.len() * KV_BLOCK * self.width * 4,
        }
    }
}

/// `values` split where positions cross into the next block.
fn chunks_by_block(position: usize, values: &[f32], width: usize) -> Vec<&[f32]> {
    let mut out = Vec::new();
    let (mut pos, mut rest) = (position, values);
    while !rest.is_empty() && width > 0 {
        let room = (KV_BLOCK - pos % KV_BLOCK) * width;
        let (now, later) = rest.split_at(room.min(rest.len()));
        out.push(now);
        pos += now.len() / width;
        rest = later;
    }
    out
}

/// Allocates zeroed blocks up to and including `block`.
fn grow<T: Copy>(blocks: &mut Vec<Arc<Vec<T>>>, block: usize, width: usize, zero: T) {
    while blocks.len() <= block {
        blocks.push(Arc::new(vec![zero; KV_BLOCK * width]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_span_blocks_and_read_back() {
        for dtype in [KvDType::F32, KvDType::F16] {
            let mut rows = KvRows::new(dtype, 3, 100);
            assert_eq!(rows.bytes(), 0);
            let values: Vec<f32> = (0..3 * 70).map(|v| v as f32).collect();
            rows.write(0, &values[..3 * 30]).unwrap();
            rows.write(30, &values[3 * 30..]).unwrap();
            assert_eq!(rows.read_f32(70), values);
            let per = if dtype == KvDType::F16 { 2 } else { 4 };
            assert_eq!(rows.bytes(), 3 * KV_BLOCK * 3 * per);
            assert!(rows.write(99, &[1.0; 6]).is_err(), "past capacity");
            assert!(rows.write(0, &[1.0; 4]).is_err(), "not whole positions");
        }
    }

    #[test]
    fn a_fork_shares_blocks_until_either_side_writes() {
        let mut rows = KvRows::new(KvDType::F32, 2, 100);
        let values: Vec<f32> = (0..2 * 40).map(|v| v as f32).collect();
        rows.write(0, &values).unwrap();
        let mut fork = rows.fork(33);
        assert_eq!(fork.read_f32(33), values[..66]);
        // The fork's next positions go into its copy of the shared second block.
        fork.write(33, &[-1.0, -2.0]).unwrap();
        assert_eq!(rows.read_f32(40), values, "the source is untouched");
        assert_eq!(fork.read_f32(34)[66..], [-1.0, -2.0]);
        let KvBlocks::F32(a) = rows.blocks() else {
            unreachable!()
        };
        let KvBlocks::F32(b) = fork.blocks() else {
            unreachable!()
        };
        assert!(Arc::ptr_eq(&a[0], &b[0]) && !Arc::ptr_eq(&a[1], &b[1]));
    }
}
