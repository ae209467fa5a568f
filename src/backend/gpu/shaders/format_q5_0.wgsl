// Q5_0 repacked at upload: per block of 32, the scale as f32, the 32 fifth bits (bit
// j for element j) as one word, then 16 bytes of low nibbles laid out as in Q4_0;
// value = d * (q - 16). block_load ORs the fifth bits onto the nibbles' bytes and
// gives (d, -16d).
const BLOCK_WORDS: u32 = 6u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 2u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u) | (((w[base + 1u] >> e) & 1u) << 4u);
    return bitcast<f32>(w[base]) * (f32(q) - 16.0);
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * blocks + blk) * BLOCK_WORDS;
    let q = vec4<u32>(w[base + 2u], w[base + 3u], w[base + 4u], w[base + 5u]);
    let qh = vec4<u32>(w[base + 1u]);
    *lo = (q & vec4<u32>(0x0f0f0f0fu)) | fifth_bits(qh >> vec4<u32>(0u, 4u, 8u, 12u));
    *hi = ((q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu)) | fifth_bits(qh >> vec4<u32>(16u, 20u, 24u, 28u));
    let d = bitcast<f32>(w[base]);
    return vec2<f32>(d, -16.0 * d);
}
