// Greedy decoding's pick per row: the best of the row's `chunks` parts written by
// argmax_part.wgsl (one workgroup of 256 threads a row, the rows folded over
// `groups_x` workgroups in x), -1 where every logit is -inf or NaN (the CPU's `greedy`
// rule, argmax_key.wgsl).
struct Params {
    chunks: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> parts: array<vec2<i32>>;
@group(0) @binding(2) var<storage, read_write> picks: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y * p.groups_x + wg.x;
    if (row >= p.rows) {
        return;
    }
    let pick = greedy_of_parts(t, row, p.chunks);
    if (t == 0u) {
        picks[row] = pick;
    }
}
