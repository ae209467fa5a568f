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
}

impl DType {
    /// Every dtype, in tag order.
    pub const ALL: [DType; 10] = [
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
            DType::Q4K | DType::Q5K | DType::Q6K => 256,
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
    }
}
