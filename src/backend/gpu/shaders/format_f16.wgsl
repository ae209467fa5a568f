// Dense f16 weights, two per word, read with unpack2x16float (core WGSL, so no
// SHADER_F16 feature is needed to read them).
fn weight_at(row: u32, col: u32, k: u32) -> f32 {
    let i = row * k + col;
    return unpack2x16float(w[i / 2u])[i % 2u];
}
