// Softmax, in place, over each attention score row: row (t, h) holds `seen[t].x`
// scores (the positions query row t sees; none for a padding row), `stride` apart.
// One workgroup per row.
struct Params {
    stride: u32,
    heads: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> rows: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let len = seen[wg.y].x;
    if (len == 0u) {
        return;
    }
    let base = (wg.y * p.heads + wg.x) * p.stride;
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
