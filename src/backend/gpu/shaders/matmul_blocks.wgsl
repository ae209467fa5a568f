// Block formats, computed as the CPU backend (and llama.cpp) compute them: each 32
// activations are quantized to 8 bits (d = max|x| / 127, q = round(x / d), ties to
// even; s = d·Σq), then a block contributes d_w·d_x·Σ q_w·q_x (exact integer dot)
// plus the format's correction c_w·s_x. Matching the CPU's rounding keeps greedy
// decoding on the GPU on the same tokens as on the CPU.
fn accumulate(col: u32, row0: u32, t: u32, acc: ptr<function, array<f32, 8>>) {
    let blocks = p.k / 32u;
    let rows = min(ROWS, p.m - row0);
    var wq: array<i32, 32>;
    for (var b = t; b < blocks; b += 64u) {
        let scales = block_quants(col, b, p.k, &wq);
        for (var r = 0u; r < rows; r++) {
            let xb = (row0 + r) * p.k + b * 32u;
            var amax = 0.0;
            for (var e = 0u; e < 32u; e++) {
                amax = max(amax, abs(x[xb + e]));
            }
            let dx = amax / 127.0;
            let inv = select(0.0, 127.0 / amax, amax != 0.0);
            var dot = 0;
            var sum = 0;
            for (var e = 0u; e < 32u; e++) {
                let qx = i32(round(x[xb + e] * inv));
                dot += wq[e] * qx;
                sum += qx;
            }
            (*acc)[r] += scales.x * dx * f32(dot) + scales.y * (dx * f32(sum));
        }
    }
}
