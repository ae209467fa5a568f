// y = x / sqrt(mean(x²) + eps) * weight over each row (rms_row.wgsl); one workgroup per row.
struct Params {
    d: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let base = wg.x * p.d;
    let inv = row_inv_rms(base, t);
    for (var i = t; i < p.d; i += 64u) {
        y[base + i] = x[base + i] * inv * weight[i];
    }
}
