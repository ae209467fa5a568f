// Q4_0 repacked at upload: per block of 32, the scale as f32 then 16 bytes of
// nibbles (byte i: element i low, element i + 16 high); value = d * (q - 8).
// block_load gives the nibbles as packed bytes and (d, -8d): a block dots as
// d·dx·Σq·qx − 8d·sx.
const BLOCK_WORDS: u32 = 5u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 1u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u);
    return bitcast<f32>(w[base]) * (f32(q) - 8.0);
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * blocks + blk) * BLOCK_WORDS;
    let q = vec4<u32>(w[base + 1u], w[base + 2u], w[base + 3u], w[base + 4u]);
    *lo = q & vec4<u32>(0x0f0f0f0fu);
    *hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let d = bitcast<f32>(w[base]);
    return vec2<f32>(d, -8.0 * d);
}
