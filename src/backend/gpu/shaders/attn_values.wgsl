// out[t, h, d] = sum_j probs[t, h, j] * values[j, h / group, d] over the positions
// query row t sees (`seen[t].x` of them, 0 for a padding row, whose output is zero),
// the values read from the paged pool through the row's block table.
struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    stride: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> probs: array<f32>;
@group(0) @binding(4) var<storage, read> values: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let d = wg.x * 64u + t;
    let h = wg.y;
    let tok = wg.z;
    if (d >= p.head_dim) {
        return;
    }
    let row = seen[tok];
    let kvh = h / (p.heads / p.kv_heads);
    let pb = (tok * p.heads + h) * p.stride;
    var acc = 0.0;
    for (var j = 0u; j < row.x; j++) {
        let slot = tables[row.y + j / 32u] * 32u + j % 32u;
        acc += probs[pb + j] * values[(slot * p.kv_heads + kvh) * p.head_dim + d];
    }
    out[(tok * p.heads + h) * p.head_dim + d] = acc;
}
