// Activations quantized once per row and block of 32 for the block-format products
// (q8_block.wgsl): one thread a block, `group` blocks sharing one scale.
struct Params {
    len: u32,
    groups_x: u32,
    group: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> xq: array<vec4<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let b = (wg.y * p.groups_x + wg.x) * 256u + t;
    var vals: array<f32, 32>;
    if (b < p.len) {
        for (var e = 0u; e < 32u; e++) {
            vals[e] = x[b * 32u + e];
        }
    }
    let amax = group_abs_max(block_abs_max(&vals), t, p.group);
    if (b < p.len) {
        store_q8_scaled(&vals, b, amax);
    }
}
