// Q4_1 repacked at upload: per block of 32, scale d and minimum m as f32, then 16
// bytes of nibbles laid out as in Q4_0; value = d * q + m.
// block_load gives the nibbles as packed bytes and (d, m): a block dots as
// d·dx·Σq·qx + m·sx.
const BLOCK_WORDS: u32 = 6u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 2u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u);
    return bitcast<f32>(w[base]) * f32(q) + bitcast<f32>(w[base + 1u]);
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * blocks + blk) * BLOCK_WORDS;
    let q = vec4<u32>(w[base + 2u], w[base + 3u], w[base + 4u], w[base + 5u]);
    *lo = q & vec4<u32>(0x0f0f0f0fu);
    *hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    return vec2<f32>(bitcast<f32>(w[base]), bitcast<f32>(w[base + 1u]));
}
