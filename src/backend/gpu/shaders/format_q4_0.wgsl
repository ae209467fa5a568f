// Q4_0 repacked at upload: per block of 32, the scale as f32 then 16 bytes of
// nibbles (byte i: element i low, element i + 16 high); value = d * (q - 8).
const BLOCK_WORDS: u32 = 5u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 32u) + col / 32u) * BLOCK_WORDS;
    let e = col % 32u;
    let byte = (w[base + 1u + (e % 16u) / 4u] >> ((e % 4u) * 8u)) & 0xffu;
    let q = select(byte & 0xfu, byte >> 4u, e >= 16u);
    return bitcast<f32>(w[base]) * (f32(q) - 8.0);
}

fn load_block(row: u32, blk: u32, k: u32) -> array<f32, 32> {
    let base = (row * (k / 32u) + blk) * BLOCK_WORDS;
    let d = bitcast<f32>(w[base]);
    var v: array<f32, 32>;
    for (var i = 0u; i < 4u; i++) {
        let word = w[base + 1u + i];
        for (var j = 0u; j < 4u; j++) {
            let byte = (word >> (j * 8u)) & 0xffu;
            v[i * 4u + j] = d * (f32(byte & 0xfu) - 8.0);
            v[i * 4u + j + 16u] = d * (f32(byte >> 4u) - 8.0);
        }
    }
    return v;
}
