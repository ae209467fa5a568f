// y_g[m, n_g] = sum_k x[m, k] * w_g[n_g, k] for every weight g of the dispatch (q, k
// and v; gate and up): their columns are numbered one after another (`ends` holds each
// weight's last column + 1), and each column is computed as a lone product computes
// it. One workgroup of 64 threads computes 8 output columns for ROWS consecutive rows
// of x (8 for decode and small batches, 32 for steps of many rows): the 8 lanes of a
// column split its k between them, each reading (and dequantizing) its share of the
// weight row once for all the rows; a column's 8 partial sums per row are then added
// in workgroup memory in lane order, eight rows at a time, and the sum (plus the
// part's residual, where it has one) is stored. Each output's arithmetic, and so its
// bits, is the same whatever ROWS and whichever rows share its workgroup: a sequence's
// logits do not depend on the batch it runs in. Decode (m = 1) is a matrix-vector
// product with the same kernel.
const ROWS: u32 = ROWS_N;
const LANES: u32 = 8u;

struct Params {
    m: u32,
    k: u32,
    groups_x: u32,
    total: u32,
    ends: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<XTYPE>;

var<workgroup> partial: array<f32, 512>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let column = (wg.x + wg.y * p.groups_x) * (64u / LANES) + t / LANES;
    let lane = t % LANES;
    let row0 = wg.z * ROWS;
    var g = 0u;
    var start = 0u;
    for (var i = 0u; i < 3u; i++) {
        if (column >= p.ends[i]) {
            g = i + 1u;
            start = p.ends[i];
        }
    }
    let col = column - start;
    let width = p.ends[g] - start;
    var acc: array<f32, ROWS>;
    if (column < p.total) {
        accumulate_part(g, col, row0, lane, &acc);
    }
    // Eight rows at a time, thread `lane` of a column writes the column's row `lane`.
    for (var r0 = 0u; r0 < ROWS; r0 += 8u) {
        for (var r = 0u; r < 8u; r++) {
            partial[r * 64u + t] = acc[r0 + r];
        }
        workgroupBarrier();
        let row = row0 + r0 + lane;
        if (column < p.total && row < p.m) {
            let first = lane * 64u + t - lane;
            var sum = 0.0;
            for (var l = 0u; l < LANES; l++) {
                sum += partial[first + l];
            }
            store(g, row * width + col, sum);
        }
        if (r0 + 8u < ROWS) {
            workgroupBarrier();
        }
    }
}
