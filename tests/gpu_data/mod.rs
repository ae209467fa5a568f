//! Random test data for the GPU tests: a small generator and block-format weights
//! with their exact dequantized values.

use half::f16;
use switchyard::graph::DType;

/// A small deterministic generator for test data.
pub struct Lcg(pub u64);

impl Lcg {
    /// `n` values uniform in `[-scale/2, scale/2)`.
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| scale * self.next()).collect()
    }
    /// One value uniform in `[-0.5, 0.5)`.
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
    /// One uniform byte.
    pub fn byte(&mut self) -> u8 {
        ((self.next() + 0.5) * 255.99) as u8
    }
}

/// Random blocks of `dtype` for an `[n, k]` weight and their exact dequantized values.
pub fn quantized(rng: &mut Lcg, dtype: DType, n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for _ in 0..n * k / 32 {
        let d = f16::from_f32(0.01 + 0.05 * (rng.next() + 0.5));
        let m = f16::from_f32(rng.next());
        bytes.extend_from_slice(&d.to_le_bytes());
        if dtype == DType::Q4_1 {
            bytes.extend_from_slice(&m.to_le_bytes());
        }
        let (d, m) = (d.to_f32(), m.to_f32());
        let mut block = [0f32; 32];
        match dtype {
            DType::Q8_0 => {
                for v in &mut block {
                    let q = rng.byte() as i8;
                    bytes.push(q as u8);
                    *v = d * q as f32;
                }
            }
            _ => {
                for i in 0..16 {
                    let byte = rng.byte();
                    bytes.push(byte);
                    let (lo, hi) = ((byte & 15) as f32, (byte >> 4) as f32);
                    (block[i], block[i + 16]) = match dtype {
                        DType::Q4_0 => (d * (lo - 8.0), d * (hi - 8.0)),
                        _ => (d * lo + m, d * hi + m),
                    };
                }
            }
        }
        values.extend_from_slice(&block);
    }
    (bytes, values)
}
