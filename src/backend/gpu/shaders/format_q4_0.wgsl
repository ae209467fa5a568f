// Q4_0 repacked at upload: per block of 32, the scale as f32 then 16 bytes of
// nibbles (byte i: element i low, element i + 16 high); value = d * (q - 8).
// block_quants gives the nibbles and (d, -8d): a block dots as d·dx·Σq·qx − 8d·sx.
const BLOCK_WORDS: u32 = 5u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 1u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u);
    return bitcast<f32>(w[base]) * (f32(q) - 8.0);
}

fn block_quants(row: u32, blk: u32, k: u32, q: ptr<function, array<i32, 32>>) -> vec2<f32> {
    let base = (row * (k / 32u) + blk) * BLOCK_WORDS;
    for (var i = 0u; i < 4u; i++) {
        let word = w[base + 1u + i];
        for (var j = 0u; j < 4u; j++) {
            let byte = (word >> (j * 8u)) & 0xffu;
            (*q)[i * 4u + j] = i32(byte & 0xfu);
            (*q)[i * 4u + j + 16u] = i32(byte >> 4u);
        }
    }
    let d = bitcast<f32>(w[base]);
    return vec2<f32>(d, -8.0 * d);
}
