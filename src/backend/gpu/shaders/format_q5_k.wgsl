// Q5_K as in the file (176 bytes, whole words): per super-block of 256, d and dmin as
// two f16 in one word, 12 bytes of packed 6-bit sub-block scales and minima, 32 bytes
// of fifth bits (bit j of byte l for element l of sub-block j), then 128 bytes of
// nibbles laid out as in Q4_K; value = d·sc·q − dmin·m. A block of 32 is a sub-block:
// block_load gives its 5-bit values as packed bytes and (d·sc, −dmin·m).
const BLOCK_WORDS: u32 = 44u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 256u) + col / 256u) * BLOCK_WORDS;
    let j = (col % 256u) / 32u;
    let l = col % 32u;
    let byte = w[base + 12u + 8u * (j / 2u) + l / 4u] >> ((l % 4u) * 8u);
    let high = (w[base + 4u + l / 4u] >> ((l % 4u) * 8u + j)) & 1u;
    let q = ((byte >> (4u * (j % 2u))) & 0xfu) | (high << 4u);
    let dm = unpack2x16float(w[base]);
    let sm = scale_min(base, j);
    return dm.x * sm.x * f32(q) - dm.y * sm.y;
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * (blocks / 8u) + blk / 8u) * BLOCK_WORDS;
    let j = blk % 8u;
    let at = base + 12u + 8u * (j / 2u);
    let shift = vec4<u32>(4u * (j % 2u));
    let nibbles = vec4<u32>(0x0f0f0f0fu);
    let bit = vec4<u32>(j);
    let ones = vec4<u32>(0x01010101u);
    let h = base + 4u;
    let hlo = ((vec4<u32>(w[h], w[h + 1u], w[h + 2u], w[h + 3u]) >> bit) & ones) << vec4<u32>(4u);
    let hhi = ((vec4<u32>(w[h + 4u], w[h + 5u], w[h + 6u], w[h + 7u]) >> bit) & ones) << vec4<u32>(4u);
    *lo = ((vec4<u32>(w[at], w[at + 1u], w[at + 2u], w[at + 3u]) >> shift) & nibbles) | hlo;
    *hi = ((vec4<u32>(w[at + 4u], w[at + 5u], w[at + 6u], w[at + 7u]) >> shift) & nibbles) | hhi;
    let dm = unpack2x16float(w[base]);
    let sm = scale_min(base, j);
    return vec2<f32>(dm.x * sm.x, -(dm.y * sm.y));
}
