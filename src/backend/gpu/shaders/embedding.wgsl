// y[i, c] = table[ids[i], c] for a table in any weight format; an id outside the
// table gives a zero row (the runner checks ids against the vocabulary first).
struct Params {
    n: u32,
    d: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<WORD>;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i >= p.n * p.d) {
        return;
    }
    let id = ids[i / p.d];
    if (id < 0 || u32(id) >= p.rows) {
        y[i] = 0.0;
        return;
    }
    y[i] = weight_at(u32(id), i % p.d, p.d);
}
