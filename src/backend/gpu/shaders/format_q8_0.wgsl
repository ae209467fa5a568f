// Q8_0 repacked at upload: per block of 32, the scale as f32 then 32 signed bytes;
// value = d * q.
// block_load gives the signed bytes and (d, 0): a block dots as d·dx·Σq·qx.
const BLOCK_WORDS: u32 = 9u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let q = extractBits(bitcast<i32>(w[base + 1u + e / 4u]), (e % 4u) * 8u, 8u);
    return bitcast<f32>(w[base]) * f32(q);
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * blocks + blk) * BLOCK_WORDS;
    *lo = vec4<u32>(w[base + 1u], w[base + 2u], w[base + 3u], w[base + 4u]);
    *hi = vec4<u32>(w[base + 5u], w[base + 6u], w[base + 7u], w[base + 8u]);
    return vec2<f32>(bitcast<f32>(w[base]), 0.0);
}
