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

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let len = seen[wg.y].x;
    if (len == 0u) {
        return;
    }
    softmax_in_place((wg.y * p.heads + wg.x) * p.stride, len, t);
}
