// The graph's softmax, in place over rows of `len` elements, `stride` apart; one
// workgroup per row, the rows folded over `groups_x` workgroups in x. (Attention's
// scores have their own kernel, attn_softmax.wgsl; both end with softmax_row.wgsl.)
struct Params {
    len: u32,
    stride: u32,
    groups_x: u32,
    rows: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> rows: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y * p.groups_x + wg.x;
    if (row >= p.rows) {
        return;
    }
    softmax_in_place(row * p.stride, p.len, t);
}
