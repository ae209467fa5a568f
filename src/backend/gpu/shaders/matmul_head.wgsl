// y[m, n] = sum_k x[m, k] * w[n, k]. One workgroup of 64 threads computes 8 output
// columns (weight rows) for ROWS consecutive rows of x: the 8 lanes of a column split
// its k between them, each reading (and dequantizing) its share of the weight row
// once for all the rows; a column's 8 partial sums per row are then added in
// workgroup memory in lane order. Decode (m = 1) is a matrix-vector product with the
// same kernel.
const ROWS: u32 = 8u;
const LANES: u32 = 8u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<XTYPE>;
@group(0) @binding(2) var<storage, read> w: array<WORD>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> partial: array<f32, 512>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let col = (wg.x + wg.y * p.groups_x) * (64u / LANES) + t / LANES;
    let lane = t % LANES;
    let row0 = wg.z * ROWS;
    var acc: array<f32, 8>;
    if (col < p.n) {
        accumulate(col, row0, lane, &acc);
    }
    for (var r = 0u; r < ROWS; r++) {
        partial[r * 64u + t] = acc[r];
    }
    workgroupBarrier();
    // Thread `lane` of a column writes the column's row `lane`.
    if (col < p.n && row0 + lane < p.m) {
        let first = lane * 64u + t - lane;
        var sum = 0.0;
        for (var l = 0u; l < LANES; l++) {
            sum += partial[first + l];
        }
        y[(row0 + lane) * p.n + col] = sum;
    }
}
