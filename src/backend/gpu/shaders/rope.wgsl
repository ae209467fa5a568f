// Rotary position embedding over x [n, heads, head_dim]: one element per thread. The
// angle is reduced to [-pi, pi] before sin/cos, whose WGSL accuracy is only specified
// there.
struct Params {
    len: u32,
    groups_x: u32,
    head_dim: u32,
    token_width: u32,
    n_rot: u32,
    neox: u32,
    freq_base: f32,
    freq_scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const TAU: f32 = 6.283185307179586;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i >= p.len) {
        return;
    }
    let e = i % p.head_dim;
    if (e >= p.n_rot) {
        y[i] = x[i];
        return;
    }
    var pair: u32;
    var first: bool;
    var partner: u32;
    if (p.neox == 0u) {
        pair = e / 2u;
        first = e % 2u == 0u;
        partner = select(i - 1u, i + 1u, first);
    } else {
        let half = p.n_rot / 2u;
        pair = e % half;
        first = e < half;
        partner = select(i - half, i + half, first);
    }
    let freq = pow(p.freq_base, -2.0 * f32(pair) / f32(p.n_rot));
    let theta = f32(pos[i / p.token_width]) * p.freq_scale * freq;
    let r = theta - TAU * round(theta / TAU);
    let c = cos(r);
    let s = sin(r);
    if (first) {
        y[i] = x[i] * c - x[partner] * s;
    } else {
        y[i] = x[partner] * s + x[i] * c;
    }
}
