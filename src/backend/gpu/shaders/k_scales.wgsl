// Q4_K's and Q5_K's sub-block scales and minima: byte i of the 12 packed bytes that
// follow a super-block's d and dmin (word `base`), and sub-block j's 6-bit (sc, m).
fn scale_byte(base: u32, i: u32) -> u32 {
    return (w[base + 1u + i / 4u] >> ((i % 4u) * 8u)) & 0xffu;
}

fn scale_min(base: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(scale_byte(base, j) & 63u), f32(scale_byte(base, j + 4u) & 63u));
    }
    let sc = (scale_byte(base, j + 4u) & 0xfu) | ((scale_byte(base, j - 4u) >> 6u) << 4u);
    let m = (scale_byte(base, j + 4u) >> 4u) | ((scale_byte(base, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}
