//! Asking the caches for a panel's weights and scale entries ahead of the SIMD kernels
//! that stream it from memory: both the AVX-512 and the AVX2 packed kernel call these
//! on their first pass over a panel (decisions 95, 119, 121 and 124).

use super::{Panel, PANEL};
use crate::backend::cpu::prefetch::line as prefetch_line;

/// How many blocks ahead the SIMD kernels ask for a panel's weights while they stream
/// it from memory: 16 (4 KiB of a Q4_1 panel) rather than 4, since a block's work is
/// shorter than a load from memory here (decision 95: a 16-sequence step's products
/// 12 % faster; decision 119: one-row decode 10–35 % faster, the hardware prefetcher
/// alone leaving its reads and its arithmetic to take turns; decision 124: the AVX2
/// kernel too).
pub(super) const PREFETCH_BLOCKS: usize = 16;

/// How many super-blocks ahead the SIMD kernels ask for the K-quants' and IQ4_XS's
/// scale entries: two, the span of [`PREFETCH_BLOCKS`] (1B-class decode 5–15 % faster,
/// one and four ahead no better; decisions 121 and 124).
pub(super) const SCALE_AHEAD: usize = 2;

impl Panel<'_> {
    /// Asks for block `b`'s quants and, where each block has its own (Q4_0 to Q8_0,
    /// IQ4_NL), its scale entries: 16 `d` (and Q4_1's and Q5_1's 16 `m`), two blocks to
    /// a line, streams of their own that the hardware prefetcher alone left a one-row
    /// product waiting on (asked for, `[1, 576] × [6144, 576]` Q4_1 read 5–10 % faster
    /// from memory and the Q8_0 head 5–7 %, decision 204). Every block's entry is asked
    /// for, so every line is, whatever the arrays' alignment. Past the panel's last block
    /// these are the next panel's, which comes next in the same task more often than
    /// not.
    #[inline(always)]
    pub(super) fn prefetch_block(&self, b: usize) {
        let bytes = self.kind.panel_qs();
        let at = self.qs.as_ptr().wrapping_add(b * bytes);
        for line in (0..bytes).step_by(64) {
            prefetch_line(at.wrapping_add(line));
        }
        if self.kind.blocks_per_scale() == 1 {
            prefetch_line(self.d.as_ptr().wrapping_add(b * PANEL).cast());
            if !self.m.is_empty() {
                prefetch_line(self.m.as_ptr().wrapping_add(b * PANEL).cast());
            }
        }
    }

    /// Asks for super-block `s`'s scale entries: its `d` (and `m`) and its scale units'
    /// bytes. These are streams of their own, a line of which lasts one or two
    /// super-blocks: asked for ahead like the weights, or each new line stalls a
    /// decode (decision 121). Past the panel's end as [`Self::prefetch_block`].
    #[inline(always)]
    pub(super) fn prefetch_scales(&self, s: usize) {
        prefetch_line(self.d.as_ptr().wrapping_add(s * PANEL).cast());
        let minimums = self.kind.has_sub_minimum();
        if minimums {
            prefetch_line(self.m.as_ptr().wrapping_add(s * PANEL).cast());
        }
        let bytes = self.kind.sub_bytes(self.kind.blocks_per_scale());
        for sub in &self.sub[..if minimums { 2 } else { 1 }] {
            let at = sub.as_ptr().wrapping_add(s * bytes);
            for off in (0..bytes).step_by(64) {
                prefetch_line(at.wrapping_add(off));
            }
        }
    }
}
