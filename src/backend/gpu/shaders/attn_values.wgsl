// out[t, h, d] = sum_j probs[t, h, j] * values[j, h / group, d] over the positions
// token t sees.
struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
}

struct Step {
    kv_len: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> probs: array<f32>;
@group(0) @binding(3) var<storage, read> values: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let d = wg.x * 64u + t;
    let h = wg.y;
    let tok = wg.z;
    if (d >= p.head_dim) {
        return;
    }
    let kvh = h / (p.heads / p.kv_heads);
    let len = step.kv_len + tok + 1u;
    let pb = (tok * p.heads + h) * p.capacity;
    var acc = 0.0;
    for (var j = 0u; j < len; j++) {
        acc += probs[pb + j] * values[(j * p.kv_heads + kvh) * p.head_dim + d];
    }
    out[(tok * p.heads + h) * p.head_dim + d] = acc;
}
