// Q6_K repacked at upload: per super-block of 256, the file's 128 bytes of low nibbles,
// 64 bytes of high bit pairs and 16 int8 scales (one per 16 weights), then d widened to
// f32 (53 words for the file's 210 bytes); value = d·sc·(q − 32), laid out as the CPU's
// q6_k dequantization reads it. A block of 32 has two scales, so block_load gives its
// q − 32 as packed signed bytes and (d·sc, d·sc') for elements 0-15 and 16-31, and
// this format's block_dot scales the two halves' integer dots apart.
const BLOCK_WORDS: u32 = 53u;

fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let base = (row * (k / 256u) + col / 256u) * BLOCK_WORDS;
    let e = col % 256u;
    let h = e / 128u;
    let g = (e % 128u) / 32u;
    let l = e % 32u;
    let ql = 64u * h + 32u * (g % 2u) + l;
    let qh = 128u + 32u * h + l;
    let low = (w[base + ql / 4u] >> ((ql % 4u) * 8u + 4u * (g / 2u))) & 0xfu;
    let high = (w[base + qh / 4u] >> ((qh % 4u) * 8u + 2u * g)) & 3u;
    let s = 192u + 8u * h + 2u * g + l / 16u;
    let sc = extractBits(bitcast<i32>(w[base + s / 4u]), (s % 4u) * 8u, 8u);
    let q = i32(low | (high << 4u)) - 32;
    return bitcast<f32>(w[base + 52u]) * f32(sc) * f32(q);
}

fn block_load(row: u32, blk: u32, blocks: u32, lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>) -> vec2<f32> {
    let base = (row * (blocks / 8u) + blk / 8u) * BLOCK_WORDS;
    let h = (blk % 8u) / 4u;
    let g = blk % 4u;
    let ql = base + 16u * h + 8u * (g % 2u);
    let qh = base + 32u + 8u * h;
    let lshift = vec4<u32>(4u * (g / 2u));
    let hshift = vec4<u32>(2u * g);
    let nibbles = vec4<u32>(0x0f0f0f0fu);
    let pairs = vec4<u32>(0x03030303u);
    let qlo = ((vec4<u32>(w[ql], w[ql + 1u], w[ql + 2u], w[ql + 3u]) >> lshift) & nibbles)
        | (((vec4<u32>(w[qh], w[qh + 1u], w[qh + 2u], w[qh + 3u]) >> hshift) & pairs) << vec4<u32>(4u));
    let qhi = ((vec4<u32>(w[ql + 4u], w[ql + 5u], w[ql + 6u], w[ql + 7u]) >> lshift) & nibbles)
        | (((vec4<u32>(w[qh + 4u], w[qh + 5u], w[qh + 6u], w[qh + 7u]) >> hshift) & pairs) << vec4<u32>(4u));
    // q − 32 in every byte without borrows: (q + 128 − 32) then flip the top bit.
    let top = vec4<u32>(0x80808080u);
    *lo = ((qlo | top) - vec4<u32>(0x20202020u)) ^ top;
    *hi = ((qhi | top) - vec4<u32>(0x20202020u)) ^ top;
    let s = 8u * h + 2u * g;
    let scales = bitcast<i32>(w[base + 48u + s / 4u]);
    let d = bitcast<f32>(w[base + 52u]);
    return vec2<f32>(d * f32(extractBits(scales, (s % 4u) * 8u, 8u)), d * f32(extractBits(scales, (s % 4u) * 8u + 8u, 8u)));
}

fn block_dot(s: vec2<f32>, lo: i32, hi: i32, dx: f32, sum: f32) -> f32 {
    return s.x * dx * f32(lo) + s.y * dx * f32(hi);
}
