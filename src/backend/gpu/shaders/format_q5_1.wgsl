// Q5_1 as in the file (24 bytes, whole words): per block of 32, d and m as two f16 in
// one word, the 32 fifth bits as one word, then 16 bytes of low nibbles laid out as in
// Q4_0; value = d * q + m. block_load ORs the fifth bits onto the nibbles' bytes and
// gives (d, m).
const BLOCK_WORDS: u32 = 6u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 2u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u) | (((w[base + 1u] >> e) & 1u) << 4u);
    let dm = unpack2x16float(w[base]);
    return dm.x * f32(q) + dm.y;
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * blocks + blk) * BLOCK_WORDS;
    let q = vec4<u32>(w[base + 2u], w[base + 3u], w[base + 4u], w[base + 5u]);
    let qh = vec4<u32>(w[base + 1u]);
    *lo = (q & vec4<u32>(0x0f0f0f0fu)) | fifth_bits(qh >> vec4<u32>(0u, 4u, 8u, 12u));
    *hi = ((q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu)) | fifth_bits(qh >> vec4<u32>(16u, 20u, 24u, 28u));
    return unpack2x16float(w[base]);
}
