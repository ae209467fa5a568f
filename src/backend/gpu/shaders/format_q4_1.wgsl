// Q4_1 repacked at upload: per block of 32, scale d and minimum m as f32, then 16
// bytes of nibbles laid out as in Q4_0; value = d * q + m.
// block_quants gives the nibbles and (d, m): a block dots as d·dx·Σq·qx + m·sx.
const BLOCK_WORDS: u32 = 6u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 2u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u);
    return bitcast<f32>(w[base]) * f32(q) + bitcast<f32>(w[base + 1u]);
}

fn block_quants(row: u32, blk: u32, k: u32, q: ptr<function, array<i32, 32>>) -> vec2<f32> {
    let base = (row * (k / 32u) + blk) * BLOCK_WORDS;
    for (var i = 0u; i < 4u; i++) {
        let word = w[base + 2u + i];
        for (var j = 0u; j < 4u; j++) {
            let byte = (word >> (j * 8u)) & 0xffu;
            (*q)[i * 4u + j] = i32(byte & 0xfu);
            (*q)[i * 4u + j + 16u] = i32(byte >> 4u);
        }
    }
    let d = bitcast<f32>(w[base]);
    return vec2<f32>(d, bitcast<f32>(w[base + 1u]));
}
