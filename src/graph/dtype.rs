//! Element types of graph values, including the GGUF block formats that weights may use.

use serde::Serialize;

/// The element type of a value. Block formats (`Q*`) are weight-only: activations are
/// `F32`, `F16`, `BF16` or `I32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u8)]
pub enum DType {
    /// IEEE 754 single precision.
    F32 = 0,
    /// IEEE 754 half precision.
    F16 = 1,
    /// bfloat16.
    BF16 = 2,
    /// 32-bit signed integer (token ids, positions).
    I32 = 3,
    /// GGUF Q4_0: blocks of 32 weights, one f16 scale, 4-bit values.
    Q4_0 = 4,
    /// GGUF Q4_1: blocks of 32 weights, f16 scale and minimum, 4-bit values.
    Q4_1 = 5,
    /// GGUF Q8_0: blocks of 32 weights, one f16 scale, 8-bit values.
    Q8_0 = 6,
    /// GGUF Q4_K: super-blocks of 256 weights with 6-bit sub-block scales.
    Q4K = 7,
    /// GGUF Q5_K: super-blocks of 256 weights, 5-bit values.
    Q5K = 8,
    /// GGUF Q6_K: super-blocks of 256 weights, 6-bit values.
    Q6K = 9,
    /// GGUF Q5_0: blocks of 32 weights, one f16 scale, 5-bit values (4 low bits packed
    /// as nibbles, the fifth in a 32-bit mask), weights `(q − 16)·d`.
    Q5_0 = 10,
    /// GGUF Q5_1: blocks of 32 weights, f16 scale and minimum, 5-bit values, `q·d + m`.
    Q5_1 = 11,
    /// GGUF Q2_K: super-blocks of 256 weights, 2-bit values, 4-bit sub-block scales and
    /// minima.
    Q2K = 12,
    /// GGUF Q3_K: super-blocks of 256 weights, 3-bit values, 6-bit signed sub-block scales.
    Q3K = 13,
    /// GGUF IQ4_NL: blocks of 32 weights, one f16 scale, 4-bit indices into a fixed
    /// non-linear table of 16 `i8` values.
    IQ4NL = 14,
    /// GGUF IQ4_XS: super-blocks of 256 weights, IQ4_NL's table with 6-bit sub-block
    /// scales.
    IQ4XS = 15,
}

impl DType {
    /// Every dtype, in tag order.
    pub const ALL: [DType; 16] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q8_0,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::IQ4NL,
        DType::IQ4XS,
    ];

    /// Short lower-case name, as used in GGUF tools and in our CLI output.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q8_0 => "q8_0",
            DType::Q4K => "q4_k",
            DType::Q5K => "q5_k",
            DType::Q6K => "q6_k",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q2K => "q2_k",
            DType::Q3K => "q3_k",
            DType::IQ4NL => "iq4_nl",
            DType::IQ4XS => "iq4_xs",
        }
    }

    /// Whether this is a block-quantized weight format.
    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// Whether values of this type are floating point activations (f32/f16/bf16).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q8_0 => 32,
            DType::Q5_0 | DType::Q5_1 | DType::IQ4NL => 32,
            DType::Q4K | DType::Q5K | DType::Q6K => 256,
            DType::Q2K | DType::Q3K | DType::IQ4XS => 256,
        }
    }

    /// Bytes per block (bytes per element for plain types).
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q8_0 => 34,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::IQ4NL => 18,
            DType::IQ4XS => 136,
        }
    }

    /// Bytes needed for `n_elems` elements, or `None` when `n_elems` is not a whole
    /// number of blocks or the size overflows.
    pub fn bytes_for(self, n_elems: usize) -> Option<usize> {
        let block = self.block_elems();
        if !n_elems.is_multiple_of(block) {
            return None;
        }
        (n_elems / block).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_match_gguf() {
        assert_eq!(DType::Q4_1.bytes_for(64), Some(40));
        assert_eq!(DType::Q6K.bytes_for(512), Some(420));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
        // ggml's sizeof(block_*) for one block of each newer format.
        for (dtype, elems, bytes) in [
            (DType::Q5_0, 32, 22),
            (DType::Q5_1, 32, 24),
            (DType::IQ4NL, 32, 18),
            (DType::Q2K, 256, 84),
            (DType::Q3K, 256, 110),
            (DType::IQ4XS, 256, 136),
        ] {
            assert_eq!(dtype.bytes_for(elems), Some(bytes), "{dtype}");
            assert_eq!(dtype.bytes_for(elems / 2), None, "{dtype}");
        }
    }

    #[test]
    fn all_lists_every_tag_once_in_order() {
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i, "{d}");
        }
    }
}
