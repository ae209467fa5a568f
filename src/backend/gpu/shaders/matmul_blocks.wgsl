// Block formats: each thread dequantizes whole blocks of 32 and dots them with every row.
fn accumulate(col: u32, row0: u32, t: u32, acc: ptr<function, array<f32, 8>>) {
    let blocks = p.k / 32u;
    let rows = min(ROWS, p.m - row0);
    for (var b = t; b < blocks; b += 64u) {
        let v = load_block(col, b, p.k);
        for (var r = 0u; r < rows; r++) {
            let xb = (row0 + r) * p.k + b * 32u;
            var s = 0.0;
            for (var e = 0u; e < 32u; e++) {
                s += v[e] * x[xb + e];
            }
            (*acc)[r] += s;
        }
    }
}
