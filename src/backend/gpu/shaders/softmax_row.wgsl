// One workgroup of 64 threads turns the `len` values of `rows` from `base` on into their
// softmax, in place: the maximum and the sum reduced in workgroup memory. Appended to
// softmax.wgsl and attn_softmax.wgsl, which bind `rows`.
var<workgroup> red: array<f32, 64>;

fn softmax_in_place(base: u32, len: u32, t: u32) {
    var m = -3.0e38;
    for (var i = t; i < len; i += 64u) {
        m = max(m, rows[base + i]);
    }
    red[t] = m;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] = max(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var i = t; i < len; i += 64u) {
        let e = exp(rows[base + i] - mx);
        rows[base + i] = e;
        sum += e;
    }
    red[t] = sum;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    for (var i = t; i < len; i += 64u) {
        rows[base + i] *= inv;
    }
}
