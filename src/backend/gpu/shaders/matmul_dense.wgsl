// Dense formats (f32, f16, bf16): a column's lanes stride over k one element at a time, any k.
fn accumulate(col: u32, row0: u32, lane: u32, acc: ptr<function, array<f32, ROWS>>) {
    let rows = min(ROWS, p.m - row0);
    for (var e = lane; e < p.k; e += LANES) {
        let wv = weight_at(col, e, p.k);
        for (var r = 0u; r < rows; r++) {
            (*acc)[r] += wv * x[(row0 + r) * p.k + e];
        }
    }
}
