// y[m, n] = sum_k x[m, k] * w[n, k]. One workgroup of 64 threads computes one output
// column (weight row) for ROWS consecutive rows of x: the weight row is read (and
// dequantized) once for all of them, the 64 partial sums are reduced in workgroup
// memory. Decode (m = 1) is a matrix-vector product with the same kernel.
const ROWS: u32 = 8u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<WORD>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> partial: array<f32, 512>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let col = wg.x + wg.y * p.groups_x;
    let row0 = wg.z * ROWS;
    var acc: array<f32, 8>;
    if (col < p.n) {
        accumulate(col, row0, t, &acc);
    }
    for (var r = 0u; r < ROWS; r++) {
        partial[r * 64u + t] = acc[r];
    }
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            for (var r = 0u; r < ROWS; r++) {
                partial[r * 64u + t] += partial[r * 64u + t + s];
            }
        }
        workgroupBarrier();
    }
    if (t < ROWS && col < p.n && row0 + t < p.m) {
        y[(row0 + t) * p.n + col] = partial[t * 64u];
    }
}
