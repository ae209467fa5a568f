// The rotary embedding of a step's queries and keys, and the write of its keys and
// values into the paged KV pool, in one dispatch: one thread per element of q, then
// one per pair of adjacent elements of k (whose thread also writes the matching values;
// each element rotates with its partner read from the unroped input, so a pair need not
// be a rotation pair). Roped queries go to `q_out`, roped keys to `k_out` and, with the
// values, to slot pos % 32 of block tables[base + pos / 32] of their row's sequence
// (`seen[r] = (pos + 1, base)`; 0 for a padding row, written nowhere). The rotation is
// rope.wgsl's arithmetic; `store_pair` (kv_store_f32.wgsl or kv_store_f16.wgsl) stores
// as the pool's type holds values.
struct Params {
    q_len: u32,
    k_pairs: u32,
    groups_x: u32,
    head_dim: u32,
    q_width: u32,
    k_width: u32,
    n_rot: u32,
    neox: u32,
    freq_base: f32,
    freq_scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> pos: array<i32>;
@group(0) @binding(4) var<storage, read> q: array<f32>;
@group(0) @binding(5) var<storage, read> k: array<f32>;
@group(0) @binding(6) var<storage, read> v: array<f32>;
@group(0) @binding(7) var<storage, read_write> q_out: array<f32>;
@group(0) @binding(8) var<storage, read_write> k_out: array<f32>;
@group(0) @binding(9) var<storage, read_write> keys: array<KvWord>;
@group(0) @binding(10) var<storage, read_write> values: array<KvWord>;

const TAU: f32 = 6.283185307179586;

struct Pair {
    partner: u32,
    pair: u32,
    first: bool,
}

// The element element `i` (dimension `e` of its head) rotates with.
fn pair_of(i: u32, e: u32) -> Pair {
    if (p.neox == 0u) {
        let first = e % 2u == 0u;
        return Pair(select(i - 1u, i + 1u, first), e / 2u, first);
    }
    let half = p.n_rot / 2u;
    let first = e < half;
    return Pair(select(i - half, i + half, first), e % half, first);
}

fn rotate(value: f32, partner: f32, pr: Pair, position: i32) -> f32 {
    let freq = pow(p.freq_base, -2.0 * f32(pr.pair) / f32(p.n_rot));
    let theta = f32(position) * p.freq_scale * freq;
    let r = theta - TAU * round(theta / TAU);
    let c = cos(r);
    let s = sin(r);
    if (pr.first) {
        return value * c - partner * s;
    }
    return partner * s + value * c;
}

// Key element j (of row r) after its rotation.
fn rope_k(j: u32, r: u32) -> f32 {
    let e = j % p.head_dim;
    if (e >= p.n_rot) {
        return k[j];
    }
    let pr = pair_of(j, e);
    return rotate(k[j], k[pr.partner], pr, pos[r]);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i < p.q_len) {
        let e = i % p.head_dim;
        var out = q[i];
        if (e < p.n_rot) {
            let pr = pair_of(i, e);
            out = rotate(q[i], q[pr.partner], pr, pos[i / p.q_width]);
        }
        q_out[i] = out;
        return;
    }
    let pair = i - p.q_len;
    if (pair >= p.k_pairs) {
        return;
    }
    let j = pair * 2u;
    let r = j / p.k_width;
    let out0 = rope_k(j, r);
    let out1 = rope_k(j + 1u, r);
    k_out[j] = out0;
    k_out[j + 1u] = out1;
    let row = seen[r];
    if (row.x == 0u) {
        return;
    }
    let at_pos = row.x - 1u;
    let block = tables[row.y + at_pos / 32u];
    let at = (block * 32u + at_pos % 32u) * p.k_width + j % p.k_width;
    store_pair(at, out0, out1, v[j], v[j + 1u]);
}
