// Q8_0 repacked at upload: per block of 32, the scale as f32 then 32 signed bytes;
// value = d * q.
const BLOCK_WORDS: u32 = 9u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let q = extractBits(bitcast<i32>(w[base + 1u + e / 4u]), (e % 4u) * 8u, 8u);
    return bitcast<f32>(w[base]) * f32(q);
}

fn load_block(row: u32, blk: u32, k: u32) -> array<f32, 32> {
    let base = (row * (k / 32u) + blk) * BLOCK_WORDS;
    let d = bitcast<f32>(w[base]);
    var v: array<f32, 32>;
    for (var i = 0u; i < 8u; i++) {
        let word = bitcast<i32>(w[base + 1u + i]);
        for (var j = 0u; j < 4u; j++) {
            v[i * 4u + j] = d * f32(extractBits(word, j * 8u, 8u));
        }
    }
    return v;
}
