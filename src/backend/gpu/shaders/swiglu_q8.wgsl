// silu(gate) · up, quantized for the block-format product that alone reads it: one
// thread per block of 32, the same arithmetic as the SwiGLU kernel, then q8_block.wgsl
// with `group` blocks sharing one scale; the f32 result is never stored.
struct Params {
    len: u32,
    groups_x: u32,
    group: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<vec4<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let b = (wg.y * p.groups_x + wg.x) * 256u + t;
    var vals: array<f32, 32>;
    if (b < p.len) {
        for (var e = 0u; e < 32u; e++) {
            let u = gate[b * 32u + e];
            vals[e] = u / (1.0 + exp(-u)) * up[b * 32u + e];
        }
    }
    let amax = group_abs_max(block_abs_max(&vals), t, p.group);
    if (b < p.len) {
        store_q8_scaled(&vals, b, amax);
    }
}
