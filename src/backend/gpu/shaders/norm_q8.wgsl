// RMS normalisation quantized for the block-format products that alone read it: one
// workgroup per row computes 1 / sqrt(mean(x²) + eps) (rms_row.wgsl), then each
// thread scales and quantizes whole blocks of 32 (q8_block.wgsl), `group` blocks
// sharing one scale; the f32 result is never stored.
struct Params {
    d: u32,
    eps: f32,
    group: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<vec4<u32>>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let base = wg.x * p.d;
    let inv = row_inv_rms(base, t);
    let blocks = p.d / 32u;
    for (var first = 0u; first < blocks; first += 64u) {
        let b = first + t;
        var vals: array<f32, 32>;
        if (b < blocks) {
            for (var e = 0u; e < 32u; e++) {
                let i = b * 32u + e;
                vals[e] = x[base + i] * inv * weight[i];
            }
        }
        let amax = group_abs_max(block_abs_max(&vals), t, p.group);
        if (b < blocks) {
            store_q8_scaled(&vals, wg.x * blocks + b, amax);
        }
    }
}
