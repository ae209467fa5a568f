// Q8_0 repacked at upload: per block of 32, the scale as f32 then 32 signed bytes;
// value = d * q.
// block_quants gives the signed bytes and (d, 0): a block dots as d·dx·Σq·qx.
const BLOCK_WORDS: u32 = 9u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let q = extractBits(bitcast<i32>(w[base + 1u + e / 4u]), (e % 4u) * 8u, 8u);
    return bitcast<f32>(w[base]) * f32(q);
}

fn block_quants(row: u32, blk: u32, k: u32, q: ptr<function, array<i32, 32>>) -> vec2<f32> {
    let base = (row * (k / 32u) + blk) * BLOCK_WORDS;
    for (var i = 0u; i < 8u; i++) {
        let word = bitcast<i32>(w[base + 1u + i]);
        for (var j = 0u; j < 4u; j++) {
            (*q)[i * 4u + j] = extractBits(word, j * 8u, 8u);
        }
    }
    return vec2<f32>(bitcast<f32>(w[base]), 0.0);
}
