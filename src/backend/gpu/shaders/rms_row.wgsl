// 1 / sqrt(mean(x²) + eps) over the row of `p.d` values of `x` from `base`, reduced by
// the workgroup's 64 threads in `sums` (every thread gets it). Appended to the kernels
// that normalise rows, which bind `x` and carry `d` and `eps` in their parameters.
var<workgroup> sums: array<f32, 64>;

fn row_inv_rms(base: u32, t: u32) -> f32 {
    var acc = 0.0;
    for (var i = t; i < p.d; i += 64u) {
        let v = x[base + i];
        acc += v * v;
    }
    sums[t] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            sums[t] += sums[t + s];
        }
        workgroupBarrier();
    }
    return inverseSqrt(sums[0] / f32(p.d) + p.eps);
}
