// Dense bf16 weights, two per word (element 0 in the low half): a bf16 is the high
// half of the f32 with the same bits, so widening is a shift.
fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let i = row * k + col;
    let word = w[i / 2u];
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, i % 2u == 1u));
}
