// A draw's arithmetic, shared by draw_cut.wgsl, draw_sums.wgsl and draw_pick.wgsl: a
// logit's weight e^((l − max)/T) relative to its row's best, 0 below min-p and below
// the row's floor (draw_cut.wgsl's), as the CPU's `draw` computes it (NaN is never
// chosen, +inf counts as the largest finite value), each row's settings (temperature,
// min-p, random bits, top-k, top-p in 2^-16, then the edits draw_edit.wgsl made), and
// its best value from the chunk bests argmax_part.wgsl wrote (their total-order keys
// turned back into values).

// e^x for x <= 0, 0 below -87: the CPU's polynomial (Cephes' expf), the power of two
// built in the exponent bits.
fn exp_nonpositive(x: f32) -> f32 {
    if (x < -87.0) {
        return 0.0;
    }
    let n = round(x * 1.442695);
    let r = x - n * 0.6933594 - n * -2.1219444e-4;
    var p = 1.9875692e-4;
    p = p * r + 1.3982e-3;
    p = p * r + 8.333452e-3;
    p = p * r + 4.1665796e-2;
    p = p * r + 0.16666665;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    return e * bitcast<f32>(u32(i32(n) + 127) << 23u);
}

// The weight of the logit with bits `bits` in a row whose best is `best` (finite), at
// temperature `t` (> 0), 0 below `min_p` (0 for none), 0 for a logit below `lowest`
// (-inf for none), and 0 for NaN and -inf.
fn weight(bits: u32, best: f32, t: f32, min_p: f32, lowest: f32) -> f32 {
    let w = select(unfloored(bits, best, t), 0.0, bitcast<f32>(bits) < lowest);
    return select(w, 0.0, w < min_p);
}

fn unfloored(bits: u32, best: f32, t: f32) -> f32 {
    let magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u || bits == 0xff800000u) {
        return 0.0;
    }
    var l = bitcast<f32>(bits);
    if (bits == 0x7f800000u) {
        l = bitcast<f32>(0x7f7fffffu);
    }
    var d = l - best;
    if (t != 1.0) {
        d = d / t;
    }
    return exp_nonpositive(d);
}

// A total-order key (argmax_key.wgsl) back to the value's bits.
fn key_bits(key: i32) -> u32 {
    return bitcast<u32>(key ^ bitcast<i32>(bitcast<u32>(key >> 31u) >> 1u));
}

// The best key of row `row`'s `chunks` chunk bests.
fn row_best(row: u32, chunks: u32) -> i32 {
    var best = parts[row * chunks].x;
    for (var c = 1u; c < chunks; c += 1u) {
        best = max(best, parts[row * chunks + c].x);
    }
    return best;
}

// Row `row`'s settings: temperature, min-p (as f32 bits) and the random bits (each row
// SETTINGS_WORDS words, a constant the host puts before this source).
fn row_settings(row: u32) -> vec3<u32> {
    let at = SETTINGS_WORDS * row;
    return vec3<u32>(settings[at], settings[at + 1u], settings[at + 2u]);
}

// Row `row`'s cut: top-k's count (0: none) and top-p in 2^-16 (65,536: none).
fn row_cut(row: u32) -> vec2<u32> {
    let at = SETTINGS_WORDS * row;
    return vec2<u32>(settings[at + 3u], settings[at + 4u]);
}
