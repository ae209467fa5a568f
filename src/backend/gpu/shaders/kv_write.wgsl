// Appends this step's key and value rows to one layer of the GPU KV cache at the
// cache's current length (a per-step uniform, so the recorded dispatch never changes).
// For an f16 cache the values are rounded to f16 as the CPU stores them, so both
// backends attend over the same keys.
struct Params {
    len: u32,
    groups_x: u32,
    width: u32,
    round_f16: u32,
}

struct Step {
    kv_len: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> keys: array<f32>;
@group(0) @binding(5) var<storage, read_write> values: array<f32>;

fn stored(v: f32) -> f32 {
    if (p.round_f16 != 0u) {
        return unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
    }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i < p.len) {
        let at = step.kv_len * p.width + i;
        keys[at] = stored(k[i]);
        values[at] = stored(v[i]);
    }
}
