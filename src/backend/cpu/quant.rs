//! Dequantization of weights to f32: plain f32/f16/bf16 and the GGUF block formats
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS,
//! following the ggml reference layouts (and its order of f32 operations, so values
//! match gguf-py's bit for bit).

use half::{bf16, f16};

use crate::backend::BackendError;
use crate::graph::DType;

/// Expands `bytes` of `dtype` into `out`, which must hold a whole number of blocks
/// that exactly matches `bytes`.
pub(super) fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), BackendError> {
    if dtype == DType::I32 || dtype.bytes_for(out.len()) != Some(bytes.len()) {
        return Err(BackendError::Input(format!(
            "{} bytes of {dtype} do not dequantize to {} f32 values",
            bytes.len(),
            out.len()
        )));
    }
    let blocks = bytes
        .chunks_exact(dtype.block_bytes())
        .zip(out.chunks_exact_mut(dtype.block_elems()));
    match dtype {
        DType::F32 => blocks.for_each(|(b, o)| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::F16 => blocks.for_each(|(b, o)| o[0] = f16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::BF16 => blocks.for_each(|(b, o)| o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::Q4_0 => blocks.for_each(|(b, o)| q4_0(b, o)),
        DType::Q4_1 => blocks.for_each(|(b, o)| q4_1(b, o)),
        DType::Q8_0 => blocks.for_each(|(b, o)| q8_0(b, o)),
        DType::Q4K => blocks.for_each(|(b, o)| q4_k(b, o)),
        DType::Q5K => blocks.for_each(|(b, o)| q5_k(b, o)),
        DType::Q6K => blocks.for_each(|(b, o)| q6_k(b, o)),
        DType::Q5_0 => blocks.for_each(|(b, o)| q5_0(b, o)),
        DType::Q5_1 => blocks.for_each(|(b, o)| q5_1(b, o)),
        DType::IQ4NL => blocks.for_each(|(b, o)| iq4_nl(b, o)),
        DType::Q2K => blocks.for_each(|(b, o)| q2_k(b, o)),
        DType::Q3K => blocks.for_each(|(b, o)| q3_k(b, o)),
        DType::IQ4XS => blocks.for_each(|(b, o)| iq4_xs(b, o)),
        DType::I32 => unreachable!("rejected above"),
    }
    Ok(())
}

/// The little-endian f16 at byte `at` of `b`, as f32.
fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `{ f16 d; u8 qs[16] }`: low nibbles are weights 0..16, high nibbles 16..32.
fn q4_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        o[j] = ((q & 0xF) as i32 - 8) as f32 * d;
        o[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qs[16] }`: `q·d + m`.
fn q4_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        o[j] = (q & 0xF) as f32 * d + m;
        o[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// `{ f16 d; i8 qs[32] }`.
fn q8_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    for (o, &q) in o.iter_mut().zip(&b[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// The 5-bit values of a Q5_0/Q5_1 block from its `qh` (fifth bits, little-endian
/// u32, bit `j` for weight `j`) and `qs` (low nibbles are weights 0..16, high 16..32).
fn five_bit(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    std::array::from_fn(|j| {
        let nibble = if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
        nibble | ((((qh >> j) & 1) as u8) << 4)
    })
}

/// `{ f16 d; u8 qh[4]; u8 qs[16] }`: `(q − 16)·d`.
fn q5_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    for (o, q) in o.iter_mut().zip(five_bit(&b[2..6], &b[6..22])) {
        *o = d * (q as i32 - 16) as f32;
    }
}

/// `{ f16 d; f16 m; u8 qh[4]; u8 qs[16] }`: `q·d + m`.
fn q5_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for (o, q) in o.iter_mut().zip(five_bit(&b[4..8], &b[8..24])) {
        *o = d * q as f32 + m;
    }
}

/// IQ4_NL's and IQ4_XS's 16 non-linear values (ggml's `kvalues_iq4nl`).
pub(crate) const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `{ f16 d; u8 qs[16] }`: `d·IQ4_VALUES[q]`, low nibbles weights 0..16, high 16..32.
fn iq4_nl(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        o[j] = d * IQ4_VALUES[(q & 0xF) as usize] as f32;
        o[j + 16] = d * IQ4_VALUES[(q >> 4) as usize] as f32;
    }
}

/// `{ u8 scales[16]; u8 qs[64]; f16 d; f16 dmin }`: 16 sub-blocks of 16, each with a
/// 4-bit scale (low nibble) and minimum (high nibble); weight `d·sc·q − dmin·m`. Byte
/// `l` of each 32-byte half of `qs` holds four 2-bit values, 32 weights apart.
fn q2_k(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (half_at(b, 80), half_at(b, 82));
    for (i, y) in o.iter_mut().enumerate() {
        let (half, shift, l) = (i / 128, (i % 128) / 32, i % 32);
        let sc = b[i / 16];
        let q = (b[16 + 32 * half + l] >> (2 * shift)) & 3;
        let (dl, ml) = (d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32);
        *y = dl * q as f32 - ml;
    }
}

/// The 6-bit scale of Q3_K sub-block `i` from its 12 packed bytes, minus 32: low 4 bits
/// in the nibbles of bytes 0..8, high 2 bits in bytes 8..12.
fn q3_k_scale(sc: &[u8], i: usize) -> i32 {
    let low = if i < 8 { sc[i] & 0xF } else { sc[i - 8] >> 4 };
    let high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// `{ u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d }`: 16 sub-blocks of 16; weight
/// `d·(sc − 32)·(q − 4·!h)`, `q` two bits laid out as Q2_K's and `h` bit `i / 32` of
/// `hmask[i % 32]`.
fn q3_k(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 108);
    let (hmask, qs, scales) = (&b[0..32], &b[32..96], &b[96..108]);
    for (i, y) in o.iter_mut().enumerate() {
        let (half, shift, l) = (i / 128, (i % 128) / 32, i % 32);
        let q = ((qs[32 * half + l] >> (2 * shift)) & 3) as i32;
        let h = (hmask[l] >> (i / 32)) & 1;
        let q = q - if h == 0 { 4 } else { 0 };
        *y = d * q3_k_scale(scales, i / 16) as f32 * q as f32;
    }
}

/// `{ f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128] }`: 8 sub-blocks of 32 with 6-bit
/// scales (low nibble from `scales_l`, two high bits from `scales_h`) minus 32, each
/// laid out as an IQ4_NL block.
fn iq4_xs(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for (ib, (q, y)) in b[8..136]
        .chunks_exact(16)
        .zip(o.chunks_exact_mut(32))
        .enumerate()
    {
        let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * ((low | (high << 4)) as i32 - 32) as f32;
        for (j, &q) in q.iter().enumerate() {
            y[j] = dl * IQ4_VALUES[(q & 0xF) as usize] as f32;
            y[j + 16] = dl * IQ4_VALUES[(q >> 4) as usize] as f32;
        }
    }
}

/// The 6-bit scale and min of sub-block `j` from the 12 packed bytes of a K-quant.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (sc as f32, m as f32)
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`: 8 sub-blocks of 32.
fn q4_k(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (chunk, (q, y)) in qs.chunks_exact(32).zip(o.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        for (l, &q) in q.iter().enumerate() {
            y[l] = d1 * (q & 0xF) as f32 - m1;
            y[l + 32] = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`: Q4_K plus a fifth bit.
fn q5_k(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (chunk, (q, y)) in qs.chunks_exact(32).zip(o.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
        for (l, &q) in q.iter().enumerate() {
            let hi1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let hi2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * ((q & 0xF) + hi1) as f32 - m1;
            y[l + 32] = d2 * ((q >> 4) + hi2) as f32 - m2;
        }
    }
}

/// `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`: two halves of 128 weights.
fn q6_k(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut o[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    fn dequant(dtype: DType, block: &[u8]) -> Vec<f32> {
        let mut out = vec![0.0; dtype.block_elems()];
        dequantize(dtype, block, &mut out).unwrap();
        out
    }

    #[test]
    fn q4_1_block_is_exact() {
        let mut block = Vec::from(f16_bytes(0.5));
        block.extend(f16_bytes(-1.0));
        // Low nibble j, high nibble 15 - j: weights 0..16 are 0..15, 16..32 are 15..0.
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let out = dequant(DType::Q4_1, &block);
        for j in 0..16 {
            assert_eq!(out[j], j as f32 * 0.5 - 1.0);
            assert_eq!(out[j + 16], (15 - j) as f32 * 0.5 - 1.0);
        }
    }

    #[test]
    fn q4_0_block_is_exact() {
        let mut block = Vec::from(f16_bytes(2.0));
        block.extend((0..16u8).map(|j| j | (j << 4)));
        let out = dequant(DType::Q4_0, &block);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 2.0);
            assert_eq!(out[j + 16], (j as f32 - 8.0) * 2.0);
        }
    }

    #[test]
    fn q8_0_block_is_exact() {
        let mut block = Vec::from(f16_bytes(0.25));
        block.extend((0..32).map(|j| (j as i8 - 16) as u8));
        let out = dequant(DType::Q8_0, &block);
        for (j, v) in out.iter().enumerate() {
            assert_eq!(*v, (j as f32 - 16.0) * 0.25);
        }
    }

    /// Packs 8 six-bit scales and mins the way ggml's `make_qkx2_quants` callers do.
    fn pack_scales(sc: [u8; 8], mn: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..8 {
            if j < 4 {
                q[j] = sc[j];
                q[j + 4] = mn[j];
            } else {
                q[j + 4] = (sc[j] & 0xF) | ((mn[j] & 0xF) << 4);
                q[j - 4] |= (sc[j] >> 4) << 6;
                q[j] |= (mn[j] >> 4) << 6;
            }
        }
        q
    }

    const SC: [u8; 8] = [1, 7, 20, 33, 40, 51, 62, 63];
    const MN: [u8; 8] = [0, 3, 17, 29, 36, 45, 58, 63];

    #[test]
    fn q4_k_block_follows_reference_formula() {
        let (d, dmin) = (0.5f32, 0.25f32);
        let mut block = Vec::from(f16_bytes(d));
        block.extend(f16_bytes(dmin));
        block.extend(pack_scales(SC, MN));
        block.extend((0..128u32).map(|i| (i * 7 % 256) as u8));
        let out = dequant(DType::Q4K, &block);
        for (i, &v) in out.iter().enumerate() {
            let (chunk, within) = (i / 64, i % 64);
            let byte = ((chunk * 32 + within % 32) * 7 % 256) as u8;
            let q = if within < 32 { byte & 0xF } else { byte >> 4 };
            let sub = i / 32;
            let want = d * SC[sub] as f32 * q as f32 - dmin * MN[sub] as f32;
            assert_eq!(v, want, "weight {i}");
        }
    }

    #[test]
    fn q5_k_block_follows_reference_formula() {
        let (d, dmin) = (0.125f32, 0.5f32);
        let mut block = Vec::from(f16_bytes(d));
        block.extend(f16_bytes(dmin));
        block.extend(pack_scales(SC, MN));
        block.extend((0..32u32).map(|i| (i * 37 % 256) as u8));
        block.extend((0..128u32).map(|i| (i * 11 % 256) as u8));
        let out = dequant(DType::Q5K, &block);
        for (i, &v) in out.iter().enumerate() {
            let (sub, l) = (i / 32, i % 32);
            let byte = (((sub / 2) * 32 + l) * 11 % 256) as u8;
            let low = if sub % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let high = ((l * 37 % 256) as u8 >> sub) & 1;
            let q = low + 16 * high;
            let want = d * SC[sub] as f32 * q as f32 - dmin * MN[sub] as f32;
            assert_eq!(v, want, "weight {i}");
        }
    }

    #[test]
    fn q6_k_block_follows_reference_formula() {
        let d = 0.5f32;
        let scales: [i8; 16] = [
            1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16,
        ];
        let mut block: Vec<u8> = (0..128u32).map(|i| (i * 13 % 256) as u8).collect();
        block.extend((0..64u32).map(|i| (i * 29 % 256) as u8));
        block.extend(scales.iter().map(|&s| s as u8));
        block.extend(f16_bytes(d));
        let out = dequant(DType::Q6K, &block);
        for (i, &v) in out.iter().enumerate() {
            // Weight i: half h, quarter r (which nibble/bit pair), lane l.
            let (h, r, l) = (i / 128, (i % 128) / 32, i % 32);
            let ql = block[64 * h + l + 32 * (r % 2)];
            let low = if r < 2 { ql & 0xF } else { ql >> 4 };
            let high = (block[128 + 32 * h + l] >> (2 * r)) & 3;
            let q = (low | (high << 4)) as i32 - 32;
            let want = d * scales[8 * h + 2 * r + l / 16] as f32 * q as f32;
            assert_eq!(v, want, "weight {i}");
        }
    }

    /// Every record of `tests/data/quant/dequant.bin` (written by `make_fixture.py`
    /// next to it): random blocks of one ggml type and gguf-py's dequantized values.
    fn gguf_py_records() -> Vec<(DType, &'static [u8], Vec<f32>)> {
        let mut data: &[u8] = include_bytes!("../../../tests/data/quant/dequant.bin");
        let mut records = Vec::new();
        let u32_at = |d: &[u8], at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
        while !data.is_empty() {
            let id = u32_at(data, 0);
            let n = u32_at(data, 4) as usize;
            let dtype = crate::model::gguf::dtype_from_ggml(id).unwrap();
            let raw_len = dtype.bytes_for(n).unwrap();
            let raw = &data[8..8 + raw_len];
            let values = data[8 + raw_len..8 + raw_len + 4 * n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            records.push((dtype, raw, values));
            data = &data[8 + raw_len + 4 * n..];
        }
        records
    }

    #[test]
    fn every_weight_type_matches_gguf_py_bit_for_bit() {
        let records = gguf_py_records();
        for dtype in DType::ALL
            .into_iter()
            .filter(|&d| d != DType::F32 && d != DType::I32)
        {
            let (_, raw, want) = records
                .iter()
                .find(|(d, _, _)| *d == dtype)
                .unwrap_or_else(|| panic!("no gguf-py record for {dtype}"));
            let mut got = vec![f32::NAN; want.len()];
            dequantize(dtype, raw, &mut got).unwrap();
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{dtype} value {i}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn plain_and_mismatched_sizes() {
        let mut out = [0.0; 2];
        let bytes: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        dequantize(DType::F32, &bytes, &mut out).unwrap();
        assert_eq!(out, [1.5, -2.0]);
        assert!(dequantize(DType::Q4_0, &[0; 17], &mut [0.0; 32]).is_err());
        assert!(dequantize(DType::I32, &[0; 8], &mut out).is_err());
    }
}
