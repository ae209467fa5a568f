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

/// Random blocks of `dtype` for an `[n, k]` weight and their exact dequantized values,
/// written here from ggml's block layouts (independently of the backends' readers).
pub fn quantized(rng: &mut Lcg, dtype: DType, n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for _ in 0..n * k / dtype.block_elems() {
        let start = bytes.len();
        let block = match dtype {
            DType::Q4K | DType::Q5K => k_quant(rng, dtype == DType::Q5K, &mut bytes),
            DType::Q6K => q6_k(rng, &mut bytes),
            _ => small_block(rng, dtype, &mut bytes),
        };
        assert_eq!(
            bytes.len() - start,
            dtype.block_bytes(),
            "{dtype} block size"
        );
        values.extend_from_slice(&block);
    }
    (bytes, values)
}

fn half(rng: &mut Lcg, bytes: &mut Vec<u8>, lo: f32, span: f32) -> f32 {
    let v = f16::from_f32(lo + span * (rng.next() + 0.5));
    bytes.extend_from_slice(&v.to_le_bytes());
    v.to_f32()
}

fn random_bytes(rng: &mut Lcg, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.byte()).collect()
}

/// A 32-weight block: Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0.
fn small_block(rng: &mut Lcg, dtype: DType, bytes: &mut Vec<u8>) -> Vec<f32> {
    let d = half(rng, bytes, 0.01, 0.05);
    let m = f16::from_f32(rng.next());
    if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
        bytes.extend_from_slice(&m.to_le_bytes());
    }
    let m = m.to_f32();
    let qh = if matches!(dtype, DType::Q5_0 | DType::Q5_1) {
        let qh = random_bytes(rng, 4);
        bytes.extend_from_slice(&qh);
        u32::from_le_bytes(qh.try_into().unwrap())
    } else {
        0
    };
    let mut block = vec![0f32; 32];
    if dtype == DType::Q8_0 {
        for v in &mut block {
            let q = rng.byte() as i8;
            bytes.push(q as u8);
            *v = d * q as f32;
        }
        return block;
    }
    for i in 0..16 {
        let byte = rng.byte();
        bytes.push(byte);
        for (e, nibble) in [(i, byte & 15), (i + 16, byte >> 4)] {
            let q = (nibble as u32 | ((qh >> e) & 1) << 4) as f32;
            block[e] = match dtype {
                DType::Q4_0 => d * (q - 8.0),
                DType::Q5_0 => d * (q - 16.0),
                _ => d * q + m,
            };
        }
    }
    block
}

/// A Q4_K or Q5_K super-block: d, dmin, 8 packed 6-bit (scale, min) pairs, the fifth
/// bits (Q5_K), then nibbles (32-byte chunk c: sub-block 2c low, 2c + 1 high).
fn k_quant(rng: &mut Lcg, five: bool, bytes: &mut Vec<u8>) -> Vec<f32> {
    let d = half(rng, bytes, 0.0005, 0.002);
    let dmin = half(rng, bytes, 0.0005, 0.002);
    let sc = random_bytes(rng, 12);
    bytes.extend_from_slice(&sc);
    let qh = if five {
        random_bytes(rng, 32)
    } else {
        vec![0; 32]
    };
    if five {
        bytes.extend_from_slice(&qh);
    }
    let qs = random_bytes(rng, 128);
    bytes.extend_from_slice(&qs);
    let pair = |j: usize| -> (f32, f32) {
        let (s, m) = if j < 4 {
            (sc[j] & 63, sc[j + 4] & 63)
        } else {
            (
                (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4,
                (sc[j + 4] >> 4) | (sc[j] >> 6) << 4,
            )
        };
        (d * s as f32, dmin * m as f32)
    };
    let mut out = vec![0f32; 256];
    for j in 0..8 {
        let (scale, min) = pair(j);
        for l in 0..32 {
            let nibble = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
            let q = nibble | ((qh[l] >> j) & 1) << 4;
            out[32 * j + l] = scale * q as f32 - min;
        }
    }
    out
}

/// A Q6_K super-block: ql[128], qh[64], 16 int8 scales (one per 16 weights), d; each
/// half of 128 takes 64 bytes of ql (four groups of 32: low nibbles of the first and
/// second 32 bytes, then their high nibbles) and 32 of qh (bit pairs 0-1, ..., 6-7).
fn q6_k(rng: &mut Lcg, bytes: &mut Vec<u8>) -> Vec<f32> {
    let ql = random_bytes(rng, 128);
    let qh = random_bytes(rng, 64);
    let sc = random_bytes(rng, 16);
    bytes.extend_from_slice(&ql);
    bytes.extend_from_slice(&qh);
    bytes.extend_from_slice(&sc);
    let d = half(rng, bytes, 0.0002, 0.0005);
    let mut out = vec![0f32; 256];
    for (e, v) in out.iter_mut().enumerate() {
        let (h, g, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
        let high = (qh[32 * h + l] >> (2 * g)) & 3;
        let q = (low | high << 4) as i32 - 32;
        *v = d * (sc[8 * h + 2 * g + l / 16] as i8) as f32 * q as f32;
    }
    out
}
