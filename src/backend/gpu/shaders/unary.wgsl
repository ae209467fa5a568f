// y[i] = f(a[i]) for one element per thread; f is substituted per op.
struct Params {
    len: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

fn f(v: f32) -> f32 {
    return EXPR;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i < p.len) {
        y[i] = f(a[i]);
    }
}
