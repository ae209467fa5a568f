// A block whose 32 quants share one scale: block_load's (scale, correction) make
// d_w·dx·Σ q_w·q_x (the integer dots of both halves added first) plus c_w·(dx·Σq_x).
// Appended to every block format's reader except Q6_K's, which has a scale per 16.
fn block_dot(s: vec2<f32>, lo: i32, hi: i32, dx: f32, sum: f32) -> f32 {
    return s.x * dx * f32(lo + hi) + s.y * (dx * sum);
}
