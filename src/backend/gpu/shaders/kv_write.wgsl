// Writes a step's key and value rows into the paged KV pool of one layer: row r (a
// token at position pos of its sequence) goes to slot pos % 32 of block
// tables[base + pos / 32], where `seen[r] = (pos + 1, base)` (pos + 1 = 0: a padding
// row, written nowhere). For an f16 cache the values are rounded to f16 as the CPU
// stores them, so both backends attend over the same keys.
struct Params {
    len: u32,
    groups_x: u32,
    width: u32,
    round_f16: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> keys: array<f32>;
@group(0) @binding(6) var<storage, read_write> values: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i >= p.len) {
        return;
    }
    let row = seen[i / p.width];
    if (row.x == 0u) {
        return;
    }
    let pos = row.x - 1u;
    let block = tables[row.y + pos / 32u];
    let at = (block * 32u + pos % 32u) * p.width + i % p.width;
    keys[at] = stored(k[i]);
    values[at] = stored(v[i]);
}
