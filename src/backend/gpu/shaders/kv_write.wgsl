// Writes a step's key and value rows into the paged KV pool of one layer: row r (a
// token at position pos of its sequence) goes to slot pos % 32 of block
// tables[base + pos / 32], where `seen[r] = (pos + 1, base)` (pos + 1 = 0: a padding
// row, written nowhere). One thread a pair of adjacent elements (the row width is
// even); `store_pair` (kv_store_f32.wgsl or kv_store_f16.wgsl) stores them as the
// pool's type holds them, an f16 pool rounding as the CPU's f16 cache does.
struct Params {
    pairs: u32,
    groups_x: u32,
    width: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> keys: array<KvWord>;
@group(0) @binding(6) var<storage, read_write> values: array<KvWord>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let pair = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (pair >= p.pairs) {
        return;
    }
    let i = pair * 2u;
    let row = seen[i / p.width];
    if (row.x == 0u) {
        return;
    }
    let pos = row.x - 1u;
    let block = tables[row.y + pos / 32u];
    let at = (block * 32u + pos % 32u) * p.width + i % p.width;
    store_pair(at, k[i], k[i + 1u], v[i], v[i + 1u]);
}
