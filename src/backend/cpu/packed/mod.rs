//! Weights repacked once, at compile time, into panels of [`PANEL`] rows. Block
//! formats (the 32-weight ones and the K-quants, as 32-weight blocks): one integer
//! dot-product instruction (`vpdpbusd` with AVX-512 VNNI, `vpmaddubsw`
//! on 8 rows with AVX2) multiplies a 4-byte group of an activation row, broadcast, with
//! the same group of 16 (8) weight rows at once. Each lane
//! then ends a block holding one weight row's whole integer dot product, so a block
//! costs one conversion and one or two FMAs for 16 outputs instead of per-row
//! reductions, and every activation row of a step reuses the unpacked panel. The
//! K-quants and IQ4_XS go further: their activations share one scale per 256 values, so
//! a super-block's eight dots are scaled and summed in integers and converted once.
//!
//! Every row of the activations goes through the same arithmetic whatever the number of
//! rows, so results are batch-invariant; offsets (Q4_0's 8, Q8_0's stored 128, ...) are
//! applied in integers. F16 and BF16 weights have their own panels and f32 kernels in
//! [`float`].

/// Calls `$f::<CODE>(args)` with [`code`]'s constant for the block kind `$kind`, so each
/// SIMD kernel is specialised per kind; float kinds have their own kernels ([`float`])
/// and call nothing.
#[cfg(target_arch = "x86_64")]
macro_rules! by_kind {
    ($kind:expr, $f:ident($($arg:expr),*)) => {{
        use super::{code, PackedKind};
        match $kind {
            PackedKind::Q4_0 => $f::<{ code::Q4_0 }>($($arg),*),
            PackedKind::Q4_1 => $f::<{ code::Q4_1 }>($($arg),*),
            PackedKind::Q5_0 => $f::<{ code::Q5_0 }>($($arg),*),
            PackedKind::Q5_1 => $f::<{ code::Q5_1 }>($($arg),*),
            PackedKind::Q8_0 => $f::<{ code::Q8_0 }>($($arg),*),
            PackedKind::IQ4NL => $f::<{ code::IQ4NL }>($($arg),*),
            PackedKind::IQ4XS => $f::<{ code::IQ4XS }>($($arg),*),
            PackedKind::Q4K => $f::<{ code::Q4K }>($($arg),*),
            PackedKind::Q5K => $f::<{ code::Q5K }>($($arg),*),
            PackedKind::Q6K => $f::<{ code::Q6K }>($($arg),*),
            PackedKind::F16 | PackedKind::BF16 => {}
        }
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod float;
mod lines;
#[cfg(target_arch = "x86_64")]
mod prefetch;
#[cfg(test)]
mod scalar;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rayon::prelude::*;

use lines::Lines;

use super::simd::{quantize_rows_shared, scales_mins, BlockQ8, QK, QK_K};
use crate::backend::{BackendError, SharedBytes};
use crate::graph::DType;

/// Weight rows per panel: one 512-bit register of `i32` lanes.
pub(crate) const PANEL: usize = 16;

/// Activation rows one kernel call takes (the kernel splits them into passes).
const ROW_GROUP: usize = 8;

/// Most activation rows any kernel takes a call ([`for_panels`]' `group`: 8, or 12 over
/// widened float panels).
const MAX_ROW_GROUP: usize = 12;

/// Source rows packed between two calls of [`PackedWeight::pack_releasing`]'s `done`.
pub(crate) const RELEASE_ROWS: usize = 256;

/// The weight formats with a packed layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PackedKind {
    /// `(q − 8)·d`: nibbles, the −8 applied to the integer sum.
    Q4_0,
    /// `q·d + m`: nibbles, the minimum as a second FMA with the activations' scaled sum.
    Q4_1,
    /// `(q − 16)·d`: Q4_0's nibbles plus the fifth bits in one plane as Q5_K's.
    Q5_0,
    /// `q·d + m`: Q4_1's nibbles plus the fifth bits in one plane as Q5_K's.
    Q5_1,
    /// `q·d`: bytes stored as `q + 128` (unsigned for `vpdpbusd`), the 128 taken off
    /// the integer sum.
    Q8_0,
    /// IQ4_NL, `d·IQ4_VALUES[q]`: Q4_0's nibbles, looked up in the kernels (as
    /// `IQ4_VALUES + 128` for `vpdpbusd`, the 128 taken off in integers).
    IQ4NL,
    /// IQ4_XS, `d·sc·IQ4_VALUES[q]` with a signed 6-bit `sc` per 32 weights: IQ4_NL's
    /// nibbles, `d` per super-block, `sc` as an `i8` byte per block.
    IQ4XS,
    /// Q4_K, `q·d·sc − dmin·mn` per 32-weight sub-block: nibbles as Q4_1, the
    /// super-block's f16 `d` and `dmin` once per 256 weights and the 6-bit `sc` and `mn`
    /// per sub-block as bytes; `d·sc` and `dmin·mn` are exact in f32, so the kernel is
    /// Q4_1's with both factors formed per block.
    Q4K,
    /// Q5_K: Q4_K plus each weight's fifth bit in one 64-byte plane per block (byte `t`
    /// of a row holds, at bit `g`, that of group `g`'s weight `t`).
    Q5K,
    /// Q6_K, `d·sc·(q − 32)` with an `i8` `sc` per 16 weights: the low nibbles as Q4_1's,
    /// then the top two bits of each group's weights in two 64-byte planes (byte `t` of
    /// a row in plane `p` holds, at bits `2j..2j + 2`, those of group `4p + j`'s weight
    /// `t`); the 32 and both scales applied to each 16-weight half's integer sum.
    Q6K,
    /// f16 weights, in [`float`]'s panels of columns.
    F16,
    /// bf16 weights, in [`float`]'s panels of column pairs.
    BF16,
}

/// Each block [`PackedKind`] as the `u8` constant the SIMD kernels are specialised on
/// (`K == code::Q4K`), so each kind's loop holds only its own steps.
#[cfg(target_arch = "x86_64")]
mod code {
    use super::PackedKind;

    pub(super) const Q4_0: u8 = PackedKind::Q4_0 as u8;
    pub(super) const Q4_1: u8 = PackedKind::Q4_1 as u8;
    pub(super) const Q5_0: u8 = PackedKind::Q5_0 as u8;
    pub(super) const Q5_1: u8 = PackedKind::Q5_1 as u8;
    pub(super) const Q8_0: u8 = PackedKind::Q8_0 as u8;
    pub(super) const IQ4NL: u8 = PackedKind::IQ4NL as u8;
    pub(super) const IQ4XS: u8 = PackedKind::IQ4XS as u8;
    pub(super) const Q4K: u8 = PackedKind::Q4K as u8;
    pub(super) const Q5K: u8 = PackedKind::Q5K as u8;
    pub(super) const Q6K: u8 = PackedKind::Q6K as u8;
}

impl PackedKind {
    /// The packed kind of `dtype`, if it has one.
    pub(crate) fn of(dtype: DType) -> Option<PackedKind> {
        match dtype {
            DType::Q4_0 => Some(PackedKind::Q4_0),
            DType::Q4_1 => Some(PackedKind::Q4_1),
            DType::Q5_0 => Some(PackedKind::Q5_0),
            DType::Q5_1 => Some(PackedKind::Q5_1),
            DType::Q8_0 => Some(PackedKind::Q8_0),
            DType::IQ4NL => Some(PackedKind::IQ4NL),
            DType::IQ4XS => Some(PackedKind::IQ4XS),
            DType::Q4K => Some(PackedKind::Q4K),
            DType::Q5K => Some(PackedKind::Q5K),
            DType::Q6K => Some(PackedKind::Q6K),
            DType::F16 => Some(PackedKind::F16),
            DType::BF16 => Some(PackedKind::BF16),
            _ => None,
        }
    }

    /// Weights per source block, and that block's bytes.
    fn source_block(self) -> (usize, usize) {
        match self {
            PackedKind::Q4_0 => (QK, 18),
            PackedKind::Q4_1 => (QK, 20),
            PackedKind::Q5_0 => (QK, 22),
            PackedKind::Q5_1 => (QK, 24),
            PackedKind::Q8_0 => (QK, 34),
            PackedKind::IQ4NL => (QK, 18),
            PackedKind::IQ4XS => (QK_K, 136),
            PackedKind::Q4K => (QK_K, 144),
            PackedKind::Q5K => (QK_K, 176),
            PackedKind::Q6K => (QK_K, 210),
            PackedKind::F16 | PackedKind::BF16 => (1, 2),
        }
    }

    /// Packed quant bytes of one block of one panel.
    fn panel_qs(self) -> usize {
        let row = match self {
            PackedKind::Q8_0 => 32,
            // Nibbles and two planes of top bits.
            PackedKind::Q6K => 24,
            // Nibbles, and one plane of fifth bits.
            _ if self.has_fifth_bits() => 20,
            _ => 16,
        };
        PANEL * row
    }

    /// 32-weight blocks that share one entry of `d` (and `m`).
    fn blocks_per_scale(self) -> usize {
        match self {
            PackedKind::IQ4XS | PackedKind::Q4K | PackedKind::Q5K | PackedKind::Q6K => QK_K / QK,
            _ => 1,
        }
    }

    /// What the integer sum loses per unit of the activations' sum `Σq` (the offset
    /// folded into the stored values; Q6_K's per 16-weight half).
    fn int_offset(self) -> i32 {
        match self {
            PackedKind::Q4_0 => 8,
            PackedKind::Q5_0 => 16,
            PackedKind::Q6K => 32,
            // Q8_0's stored q + 128, the IQ4 kernels' looked-up value + 128.
            PackedKind::Q8_0 => 128,
            _ if self.is_iq4() => 128,
            _ => 0,
        }
    }

    /// Activation sums `Σq` per 32-weight block: one, or Q6_K's one per 16-weight half.
    fn sums_per_block(self) -> usize {
        match self {
            PackedKind::Q6K => 2,
            _ => 1,
        }
    }

    /// Whether each block carries two bytes of its own ([`PackedWeight`]'s `sub`).
    fn has_sub_bytes(self) -> bool {
        matches!(
            self,
            PackedKind::IQ4XS | PackedKind::Q4K | PackedKind::Q5K | PackedKind::Q6K
        )
    }

    /// Bytes of `sub[0]` (and, for Q4_K and Q5_K, of `sub[1]`) per panel of `nb`
    /// blocks: one per row and scale unit (a block, or Q6_K's 16-weight half).
    fn sub_bytes(self, nb: usize) -> usize {
        if self.has_sub_bytes() {
            nb * self.sums_per_block() * PANEL
        } else {
            0
        }
    }

    /// Whether a super-block's scale units are summed in integers and converted once
    /// (the K-quants, IQ4_XS): their activations share one scale per 256 weights.
    fn is_super(self) -> bool {
        self.blocks_per_scale() > 1
    }

    /// Whether the weights are two-byte floats, in [`float`]'s layout and kernels.
    fn is_float(self) -> bool {
        matches!(self, PackedKind::F16 | PackedKind::BF16)
    }

    /// Whether the nibbles index `IQ4_VALUES` (IQ4_NL, IQ4_XS).
    fn is_iq4(self) -> bool {
        matches!(self, PackedKind::IQ4NL | PackedKind::IQ4XS)
    }

    /// Whether the fifth bits follow the nibbles in one plane (Q5_0, Q5_1, Q5_K).
    fn has_fifth_bits(self) -> bool {
        matches!(self, PackedKind::Q5_0 | PackedKind::Q5_1 | PackedKind::Q5K)
    }

    /// Whether each block's `m` is added with the activations' scaled sum (Q4_1, Q5_1).
    fn has_minimum(self) -> bool {
        matches!(self, PackedKind::Q4_1 | PackedKind::Q5_1)
    }

    /// Whether `d·sc·q − dmin·mn` per block, from per-super-block `d`, `dmin` and
    /// per-block `sc`, `mn` (Q4_K, Q5_K).
    fn has_sub_minimum(self) -> bool {
        matches!(self, PackedKind::Q4K | PackedKind::Q5K)
    }
}

/// 64 bytes on a 64-byte boundary: every 512-bit load of the quants stays inside one
/// cache line (from an unaligned vector, each load would touch two).
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CacheLine([u8; 64]);

/// A `[n, k]` weight in panels of [`PANEL`] rows (the last padded with zero rows).
///
/// Per panel and block: the quants as groups of 4 bytes, group-major then row-major
/// (for nibble formats, byte group `g` holds elements `4g..4g+4` in its low nibbles and
/// `16+4g..` in its high ones; bit planes follow as further groups), then 16 f16 scales
/// (and, for Q4_1 and Q5_1, 16 f16 minimums). The K-quants' and IQ4_XS's f16 `d` (and
/// `dmin`) are per panel and super-block; their per-unit bytes (`sub[0]`: Q4_K's and
/// Q5_K's `sc`, Q6_K's `i8` scales of the two halves, IQ4_XS's `i8` scale; `sub[1]`:
/// Q4_K's and Q5_K's `mn`) per panel in [`sub_index`]'s pairs. Float kinds keep only
/// `qs` ([`float`]'s layout).
pub(crate) struct PackedWeight {
    kind: PackedKind,
    n: usize,
    k: usize,
    qs: Lines,
    d: Vec<u16>,
    m: Vec<u16>,
    sub: [Vec<u8>; 2],
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedWeight({:?} [{}, {}], {} bytes)",
            self.kind,
            self.n,
            self.k,
            self.bytes()
        )
    }
}

/// Where row `r`'s byte of scale unit `u` (a block, or Q6_K's 16-weight half) sits in a
/// panel's `sub` array: units in pairs, each pair 16 rows × 2 bytes, so that one 32-byte
/// load widened to `i16` gives every row's two units in one 32-bit lane (for
/// `vpdpwssd` / `vpmaddwd` with a row's two activation sums).
fn sub_index(u: usize, r: usize) -> usize {
    ((u / 2) * PANEL + r) * 2 + u % 2
}

/// One 32-weight block of one source row, ready to store: its quants (the first
/// `panel_qs / PANEL` bytes: nibbles in Q4_1's byte order, then Q6_K's two bit planes,
/// or Q8_0's bytes plus 128) and its scale entries.
struct SourceBlock {
    quants: [u8; QK],
    d: u16,
    m: u16,
    sub: [u8; 2],
}

/// Calls `f(b, block)` for the 32-weight blocks `b` of one source row of `kind`, in
/// order.
fn source_blocks(kind: PackedKind, row: &[u8], mut f: impl FnMut(usize, &SourceBlock)) {
    let f16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let (_, bytes) = kind.source_block();
    for (i, block) in row.chunks_exact(bytes).enumerate() {
        let mut out = SourceBlock {
            quants: [0; QK],
            d: f16_at(block, 0),
            m: 0,
            sub: [0; 2],
        };
        match kind {
            // Not blocks: `float::pack` lays these out.
            PackedKind::F16 | PackedKind::BF16 => return,
            PackedKind::Q4_0 | PackedKind::IQ4NL => {
                out.quants[..16].copy_from_slice(&block[2..18]);
            }
            PackedKind::IQ4XS => {
                let scales_h = u16::from_le_bytes([block[2], block[3]]);
                for ib in 0..QK_K / QK {
                    // The signed 6-bit scale: low nibble in scales_l, two high bits.
                    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
                    let high = ((scales_h >> (2 * ib)) & 3) as u8;
                    let sc = (low | (high << 4)) as i8 - 32;
                    out.quants[..16].copy_from_slice(&block[8 + 16 * ib..24 + 16 * ib]);
                    out.sub = [sc as u8, 0];
                    f(i * (QK_K / QK) + ib, &out);
                }
                continue;
            }
            PackedKind::Q4_1 => {
                out.quants[..16].copy_from_slice(&block[4..20]);
                out.m = f16_at(block, 2);
            }
            PackedKind::Q5_0 | PackedKind::Q5_1 => {
                // d (and m), the fifth bits (bit j for weight j), Q4_0's nibbles.
                let at = if kind == PackedKind::Q5_1 { 4 } else { 2 };
                out.m = if kind == PackedKind::Q5_1 {
                    f16_at(block, 2)
                } else {
                    0
                };
                let qh = u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"));
                out.quants[..16].copy_from_slice(&block[at + 4..at + 20]);
                for t in 0..4 {
                    out.quants[16 + t] =
                        (0..8).map(|g| (((qh >> (4 * g + t)) & 1) as u8) << g).sum();
                }
            }
            PackedKind::Q8_0 => {
                for (q, v) in out.quants.iter_mut().zip(&block[2..34]) {
                    *q = v ^ 0x80;
                }
            }
            PackedKind::Q4K | PackedKind::Q5K => {
                out.m = f16_at(block, 2);
                let scales: &[u8; 12] = block[4..16].try_into().expect("12 bytes");
                let (sc, mn) = scales_mins(scales);
                let (qh, qs) = match kind {
                    PackedKind::Q5K => (&block[16..48], &block[48..176]),
                    _ => (&[][..], &block[16..144]),
                };
                for s in 0..QK_K / QK {
                    // Sub-block s: chunk s / 2 of 32 bytes, low nibbles when s is even;
                    // Q5_K's fifth bit of weight l is bit s of qh[l].
                    let v = |l: usize| (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0F;
                    for j in 0..16 {
                        out.quants[j] = v(j) | (v(16 + j) << 4);
                    }
                    if kind == PackedKind::Q5K {
                        for t in 0..4 {
                            out.quants[16 + t] =
                                (0..8).map(|g| ((qh[4 * g + t] >> s) & 1) << g).sum();
                        }
                    }
                    out.sub = [sc[s], mn[s]];
                    f(i * (QK_K / QK) + s, &out);
                }
                continue;
            }
            PackedKind::Q6K => {
                out.d = f16_at(block, 208);
                for s in 0..QK_K / QK {
                    let q: [u8; QK] = std::array::from_fn(|e| q6k_weight(block, QK * s + e));
                    for j in 0..16 {
                        out.quants[j] = (q[j] & 0x0F) | (q[16 + j] << 4);
                    }
                    for (p, t) in (0..2).flat_map(|p| (0..4).map(move |t| (p, t))) {
                        out.quants[16 + 4 * p + t] = (0..4)
                            .map(|j| (q[16 * p + 4 * j + t] >> 4) << (2 * j))
                            .sum();
                    }
                    out.sub = [block[192 + 2 * s], block[193 + 2 * s]];
                    f(i * (QK_K / QK) + s, &out);
                }
                continue;
            }
        }
        f(i, &out);
    }
}

/// Weight `i` (0..256) of a Q6_K block, `0..64` (32 above its value): half `h`,
/// quarter `r` (which nibble and bit pair), lane `l`.
fn q6k_weight(block: &[u8], i: usize) -> u8 {
    let (h, r, l) = (i / 128, (i % 128) / 32, i % 32);
    let ql = block[64 * h + l + 32 * (r % 2)];
    let low = if r < 2 { ql & 0x0F } else { ql >> 4 };
    let high = (block[128 + 32 * h + l] >> (2 * r)) & 3;
    low | (high << 4)
}

impl PackedWeight {
    /// Repacks the raw GGUF blocks of a `[n, k]` weight of `kind`.
    pub(crate) fn pack(
        kind: PackedKind,
        bytes: &[u8],
        n: usize,
        k: usize,
    ) -> Result<PackedWeight, BackendError> {
        Self::pack_releasing(kind, bytes, n, k, &mut |_| {})
    }

    /// [`Self::pack`], calling `done` with each byte range of `bytes` once it has been
    /// read for the last time (every [`RELEASE_ROWS`] rows), so that a file-mapped
    /// source can give its pages back while a large weight is packed rather than
    /// after: otherwise the whole source and the whole copy are resident at once.
    pub(crate) fn pack_releasing(
        kind: PackedKind,
        bytes: &[u8],
        n: usize,
        k: usize,
        done: &mut dyn FnMut(std::ops::Range<usize>),
    ) -> Result<PackedWeight, BackendError> {
        let (per_block, block_bytes) = kind.source_block();
        let row_bytes = k / per_block * block_bytes;
        if !k.is_multiple_of(per_block) || bytes.len() != n * row_bytes {
            return Err(BackendError::Input(format!(
                "cannot pack {} bytes as a [{n}, {k}] {kind:?} weight",
                bytes.len()
            )));
        }
        if kind.is_float() {
            return Ok(float::pack(kind, bytes, n, k, done));
        }
        let nb = k / QK;
        let per_scale = kind.blocks_per_scale();
        let panels = n.div_ceil(PANEL);
        let mut lines = Lines::zeroed(panels * nb * kind.panel_qs() / 64);
        let qs: &mut [u8] = bytemuck::cast_slice_mut(&mut lines[..]);
        let scales = panels * nb / per_scale * PANEL;
        let mut d = vec![0u16; scales];
        let minimums = kind.has_minimum() || kind.has_sub_minimum();
        let mut m = vec![0u16; if minimums { scales } else { 0 }];
        let panel_subs = kind.sub_bytes(nb);
        let sub_minimums = if kind.has_sub_minimum() {
            panel_subs
        } else {
            0
        };
        let mut sub = [
            vec![0u8; panels * panel_subs],
            vec![0u8; panels * sub_minimums],
        ];
        for row in 0..n {
            let (panel, r) = (row / PANEL, row % PANEL);
            let row_qs = kind.panel_qs() / PANEL;
            source_blocks(kind, &bytes[row * row_bytes..][..row_bytes], |b, block| {
                let scale_slot = (panel * nb / per_scale + b / per_scale) * PANEL + r;
                d[scale_slot] = block.d;
                if let Some(m) = m.get_mut(scale_slot) {
                    *m = block.m;
                }
                if kind == PackedKind::Q6K {
                    // The two halves' scales, units 2b and 2b + 1: one pair.
                    for (h, &sc) in block.sub.iter().enumerate() {
                        sub[0][panel_subs * panel + sub_index(2 * b + h, r)] = sc;
                    }
                } else if kind.has_sub_bytes() {
                    let at = panel_subs * panel + sub_index(b, r);
                    sub[0][at] = block.sub[0];
                    if kind.has_sub_minimum() {
                        sub[1][at] = block.sub[1];
                    }
                }
                let dst = &mut qs[(panel * nb + b) * kind.panel_qs()..][..kind.panel_qs()];
                for (j, &v) in block.quants[..row_qs].iter().enumerate() {
                    dst[((j / 4) * PANEL + r) * 4 + j % 4] = v;
                }
            });
            if (row + 1) % RELEASE_ROWS == 0 || row + 1 == n {
                let first = row - row % RELEASE_ROWS;
                done(first * row_bytes..(row + 1) * row_bytes);
            }
        }
        Ok(PackedWeight {
            kind,
            n,
            k,
            qs: lines,
            d,
            m,
            sub,
        })
    }

    /// Whether one [`matmul_many`] call can take `self` beside `other`: the same kind
    /// and width.
    pub(crate) fn is_sibling_of(&self, other: &PackedWeight) -> bool {
        self.kind == other.kind && self.k == other.k
    }

    /// Output rows.
    pub(crate) fn rows(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub(crate) fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        64 * self.qs.len()
            + 2 * (self.d.len() + self.m.len())
            + self.sub.iter().map(Vec::len).sum::<usize>()
    }

    /// Panel `p`'s quants, scales and minimums.
    fn panel(&self, p: usize) -> Panel<'_> {
        let nb = self.k / QK;
        let subs = self.kind.sub_bytes(nb);
        let span = p * subs..(p + 1) * subs;
        let per_scale = nb / self.kind.blocks_per_scale() * PANEL;
        let scales = p * per_scale..(p + 1) * per_scale;
        Panel {
            kind: self.kind,
            qs: &bytemuck::cast_slice(&self.qs[..])
                [p * nb * self.kind.panel_qs()..(p + 1) * nb * self.kind.panel_qs()],
            d: &self.d[scales.clone()],
            m: self.m.get(scales).unwrap_or(&[]),
            sub: [0, 1].map(|i| self.sub[i].get(span.clone()).unwrap_or(&[])),
            nb,
        }
    }
}

/// The packed form of the `[n, k]` weight of `dtype` in `bytes`, made now and not
/// cached (benchmarks), or `None` where [`PackCache::get`] would give none.
pub(crate) fn pack_uncached(
    dtype: DType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Result<Option<Arc<PackedWeight>>, BackendError> {
    match packed_kind(dtype) {
        Some(kind) if n > 0 && k > 0 => Ok(Some(Arc::new(PackedWeight::pack(kind, bytes, n, k)?))),
        _ => Ok(None),
    }
}

/// A source weight's identity: its bytes' address and length, dtype and rows.
type PackKey = (usize, usize, DType, usize);

/// The packed form of each weight, made once and shared by every partition that reads
/// it (an executor per step bucket would otherwise pack its own copy). Entries are weak:
/// a packed weight lives as long as some compiled partition uses it.
#[derive(Default)]
pub(crate) struct PackCache {
    entries: Mutex<HashMap<PackKey, Weak<PackedWeight>>>,
}

impl PackCache {
    /// The packed form of the `[n, k]` weight of `dtype` in `source`, or `None` when
    /// this CPU has no packed kernel or `dtype` has no packed layout. `source` must stay
    /// alive (and unchanged) while the result does: the cache keys by its address.
    /// A new packing gives `source`'s pages back as it goes ([`SharedBytes::release_range`]).
    pub(crate) fn get(
        &self,
        dtype: DType,
        source: &SharedBytes,
        n: usize,
        k: usize,
    ) -> Result<Option<Arc<PackedWeight>>, BackendError> {
        let bytes = source.as_bytes();
        let Some(kind) = packed_kind(dtype) else {
            return Ok(None);
        };
        if n == 0 || k == 0 {
            // Nothing to pack: the unpacked path gives an empty product.
            return Ok(None);
        }
        let key = (bytes.as_ptr() as usize, bytes.len(), dtype, n);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(packed) = entries.get(&key).and_then(Weak::upgrade) {
            return Ok(Some(packed));
        }
        let mut release = |range| source.release_range(range);
        let packed = Arc::new(PackedWeight::pack_releasing(
            kind,
            bytes,
            n,
            k,
            &mut release,
        )?);
        // A fault maps a whole large folio, so reading one range maps back some of the
        // ranges given back before it: give the whole source back once more.
        source.release_pages();
        entries.retain(|_, w| w.strong_count() > 0);
        entries.insert(key, Arc::downgrade(&packed));
        Ok(Some(packed))
    }
}

/// One panel of a [`PackedWeight`], as its kernels read it.
#[derive(Clone, Copy)]
struct Panel<'a> {
    kind: PackedKind,
    qs: &'a [u8],
    /// Per block (Q4_K: per super-block), 16 f16 scales.
    d: &'a [u16],
    /// As `d`, the minimums (Q4_1) or minimum scales (Q4_K); empty otherwise.
    m: &'a [u16],
    /// The K-quants and IQ4_XS: per scale unit, 16 scales (`sub[0]`) and Q4_K's and
    /// Q5_K's 16 minimums (`sub[1]`), in [`sub_index`]'s pairs; else empty.
    sub: [&'a [u8]; 2],
    nb: usize,
}

impl Panel<'_> {
    /// Whether every slice holds what the kernels read for `nb` blocks (the SIMD
    /// kernels assert it before any unchecked read).
    fn is_whole(&self) -> bool {
        let (nb, per_scale) = (self.nb, self.kind.blocks_per_scale());
        let scales = nb / per_scale * PANEL;
        let minimums = match self.kind {
            PackedKind::Q4_1 | PackedKind::Q5_1 | PackedKind::Q4K | PackedKind::Q5K => scales,
            _ => 0,
        };
        let subs = self.kind.sub_bytes(nb);
        let sub_minimums = if self.kind.has_sub_minimum() { subs } else { 0 };
        nb.is_multiple_of(per_scale)
            && self.qs.len() >= nb * self.kind.panel_qs()
            && self.d.len() >= scales
            && self.m.len() >= minimums
            && self.sub[0].len() >= subs
            && self.sub[1].len() >= sub_minimums
    }
}

/// Quantized activation rows: [`BlockQ8`]s and the integer sums `Σq` of each block's
/// `parts` equal parts (one for most kinds, Q6_K's two halves), as `i16` (at most
/// 32·127) so that two neighbours are one `i32` for `vpdpwssd`.
struct Activations {
    blocks: Vec<BlockQ8>,
    sums: Vec<i16>,
    nb: usize,
    parts: usize,
}

impl Activations {
    /// `x [m, k]` quantized for weights of `kind`: one scale per block, or per
    /// super-block (the eight blocks of 256 weights share it) where `kind` sums a
    /// super-block in integers ([`PackedKind::is_super`]), as llama.cpp's Q8_K does.
    fn quantize(
        x: &[f32],
        m: usize,
        k: usize,
        kind: PackedKind,
    ) -> Result<Activations, BackendError> {
        let nb = k / QK;
        let parts = kind.sums_per_block();
        let blocks = quantize_rows_shared(x, m, k, kind.blocks_per_scale())?;
        let sums = blocks
            .iter()
            .flat_map(|b| {
                b.qs.chunks(QK / parts)
                    .map(|q| q.iter().map(|&q| q as i16).sum())
            })
            .collect();
        Ok(Activations {
            blocks,
            sums,
            nb,
            parts,
        })
    }

    /// Rows `rows` of the activations.
    fn rows(&self, rows: std::ops::Range<usize>) -> (&[BlockQ8], &[i16]) {
        let span = rows.start * self.nb..rows.end * self.nb;
        let sums = span.start * self.parts..span.end * self.parts;
        (&self.blocks[span], &self.sums[sums])
    }
}

/// `panel(p, x, sums, rows, out, again)`: `out[i·PANEL + r] = w row (16p + r) · x row
/// i`, with `sums` [`Activations`]' for those rows; `again` when this call follows one
/// on the same panel on this thread (the next group of rows, [`for_panels`]), so what
/// the kernel derived from the panel then may be read again.
type PanelFn = fn(Panel<'_>, &[BlockQ8], &[i16], usize, &mut [f32], bool);

/// The packed kernel of this CPU, if it has one: AVX-512 with VNNI, else AVX2.
fn kernel() -> Option<PanelFn> {
    #[cfg(target_arch = "x86_64")]
    {
        static KERNEL: std::sync::OnceLock<Option<PanelFn>> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(|| avx512::kernel().or_else(avx2::kernel))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Whether a matmul weight of `dtype` is packed on this CPU (and its source then read
/// only once, while packing).
pub(crate) fn packs(dtype: DType) -> bool {
    packed_kind(dtype).is_some()
}

/// The packed kind `dtype` takes on this CPU: one with a layout and kernels here.
fn packed_kind(dtype: DType) -> Option<PackedKind> {
    PackedKind::of(dtype).filter(|&kind| available(kind))
}

/// Whether this CPU has packed kernels for `kind` (so packing such a weight pays).
fn available(kind: PackedKind) -> bool {
    if kind.is_float() {
        float::available()
    } else {
        kernel().is_some()
    }
}

/// `out [m, n] = x [m, k] · wᵀ` over the packed weight, panels in parallel on the
/// current rayon pool.
pub(crate) fn matmul(
    x: &[f32],
    m: usize,
    w: &PackedWeight,
    out: &mut [f32],
) -> Result<(), BackendError> {
    matmul_many(x, m, &[w], &mut [out])
}

/// `outs[i] [m, n_i] = x [m, k] · ws[i]ᵀ` for weights of one kind and width (sibling
/// projections of one input: q, k and v; gate and up) as one parallel region: the
/// activations are prepared once and the panels of every weight are one pool of tasks,
/// so siblings cost one fork-join, not one each. Each product is bit for bit what
/// [`matmul`] gives it alone.
pub(crate) fn matmul_many(
    x: &[f32],
    m: usize,
    ws: &[&PackedWeight],
    outs: &mut [&mut [f32]],
) -> Result<(), BackendError> {
    let Some(first) = ws.first() else {
        return Ok(());
    };
    if first.kind.is_float() {
        check_siblings(x, m, ws, outs)?;
        return float::matmul(x, m, ws, outs);
    }
    let kernel = kernel().ok_or_else(|| {
        BackendError::Bug("packed weights need AVX2 or AVX-512 VNNI, which this CPU lacks".into())
    })?;
    matmul_with(kernel, x, m, ws, outs)
}

/// That the weights share one kind and width, and that `x` is `[m, k]` and each
/// `outs[i]` `[m, n_i]` for `ws[i]`'s `[n_i, k]`.
fn check_siblings(
    x: &[f32],
    m: usize,
    ws: &[&PackedWeight],
    outs: &[&mut [f32]],
) -> Result<(), BackendError> {
    let Some(first) = ws.first() else {
        return Ok(());
    };
    if ws.len() != outs.len() || ws.iter().any(|w| w.kind != first.kind || w.k != first.k) {
        return Err(BackendError::Input(format!(
            "packed matmul: {} outputs for {} weights, which must share one kind and width",
            outs.len(),
            ws.len()
        )));
    }
    for (w, out) in ws.iter().zip(outs) {
        let (n, k) = (w.n, w.k);
        if x.len() != m * k || out.len() != m * n {
            return Err(BackendError::Input(format!(
                "packed matmul: x has {} values and out {}, expected {m}×{k} and {m}×{n}",
                x.len(),
                out.len()
            )));
        }
    }
    Ok(())
}

/// [`matmul_many`] with a given panel kernel for block-format weights, sizes checked
/// here (tests run the scalar twin through it).
fn matmul_with(
    kernel: PanelFn,
    x: &[f32],
    m: usize,
    ws: &[&PackedWeight],
    outs: &mut [&mut [f32]],
) -> Result<(), BackendError> {
    check_siblings(x, m, ws, outs)?;
    let Some(first) = ws.first() else {
        return Ok(());
    };
    if m == 0 {
        return Ok(());
    }
    let acts = Activations::quantize(x, m, first.k, first.kind)?;
    let rows: Vec<usize> = ws.iter().map(|w| w.n).collect();
    for_panels(m, &rows, outs, ROW_GROUP, |i, p, r0, rows, o| {
        let (xb, sums) = acts.rows(r0..r0 + rows);
        kernel(ws[i].panel(p), xb, sums, rows, o, r0 > 0);
    });
    Ok(())
}

/// Runs `panel(i, p, r0, rows, o)` for every panel `p` of every weight `i` (of `ns[i]`
/// rows) and every group of up to `group` activation rows from `r0`, `o` being
/// that group's `rows × PANEL` outputs; all panels of all weights in parallel, each
/// group's outputs written straight into its columns of `outs[i] [m, ns[i]]`. A
/// panel's groups are called one after another on one thread, from `r0 = 0`, with no
/// other panel between them (what [`PanelFn`]'s `again` relies on).
///
/// Each task owns a run of one weight's panels and, as safe disjoint slices, those
/// columns of every output row, so no `[panel][m][PANEL]` staging copy is allocated,
/// zeroed and gathered serially per call (at 512 rows, 16 MB for one FFN product).
fn for_panels(
    m: usize,
    ns: &[usize],
    outs: &mut [&mut [f32]],
    group: usize,
    panel: impl Fn(usize, usize, usize, usize, &mut [f32]) + Sync,
) {
    assert!((1..=MAX_ROW_GROUP).contains(&group), "row group {group}");
    if m == 0 {
        return;
    }
    let total: usize = ns.iter().map(|n| n.div_ceil(PANEL)).sum();
    // A few tasks per pool thread, so one slowed by other work is balanced by the rest;
    // one for a single row, whose product streams its weight from memory: each task
    // starts a new stream, and one a thread read the default model's small products
    // 3-15 % faster (decision 204).
    let per_thread = if m == 1 { 1 } else { 4 };
    let per_task = total
        .div_ceil(per_thread * rayon::current_num_threads())
        .max(1);
    // Every task's columns of each output row, task-major (`m` slices per task, no task
    // crossing two weights), and each task's (weight, first panel): one allocation each
    // per call, not one per task.
    let mut tasks: Vec<(usize, usize)> = Vec::new();
    let mut cols: Vec<&mut [f32]> = Vec::new();
    for (i, (&n, out)) in ns.iter().zip(outs.iter_mut()).enumerate() {
        if n == 0 {
            continue;
        }
        // This weight's tasks, each `per_task` panels (`span` columns) wide, the last
        // what is left.
        let span = per_task * PANEL;
        let count = n.div_ceil(span);
        tasks.extend((0..count).map(|t| (i, t * per_task)));
        let mut rows: Vec<_> = out
            .chunks_mut(n)
            .take(m)
            .map(|r| r.chunks_mut(span))
            .collect();
        for _ in 0..count {
            cols.extend(rows.iter_mut().filter_map(Iterator::next));
        }
    }
    cols.par_chunks_mut(m)
        .zip(tasks)
        .for_each(|(cols, (i, first))| {
            let mut o = [0.0f32; MAX_ROW_GROUP * PANEL];
            let width = cols.first().map_or(0, |c| c.len());
            for j in 0..width.div_ceil(PANEL) {
                for r0 in (0..m).step_by(group) {
                    let rows = group.min(m - r0);
                    panel(i, first + j, r0, rows, &mut o[..rows * PANEL]);
                    for (row, o) in cols[r0..r0 + rows].iter_mut().zip(o.chunks(PANEL)) {
                        let dst = &mut row[j * PANEL..];
                        let len = dst.len().min(PANEL);
                        dst[..len].copy_from_slice(&o[..len]);
                    }
                }
            }
        });
}
