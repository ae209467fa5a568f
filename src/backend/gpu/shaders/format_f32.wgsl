// Dense f32 weights: element (row, col) of a [rows, k] matrix.
fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    return w[row * k + col];
}
