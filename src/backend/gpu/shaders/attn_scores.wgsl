// scores[t, h, j] = scale * q[t, h] . keys[j, h / group] for every cached position j
// that query row t sees (j <= its position), the keys read from the paged pool through
// the row's sequence's block table (`seen[t] = (position + 1, table base)`; 0 for a
// padding row, which sees nothing). Grouped-query heads share a kv head. Soft-capping
// c > 0 turns a score s into c * tanh(s / c). With a sliding window w > 0, positions
// j <= position - w score -3e38, which the softmax turns into probability zero.
struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    stride: u32,
    scale: f32,
    window: u32,
    softcap: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> q: array<f32>;
@group(0) @binding(4) var<storage, read> keys: array<f32>;
@group(0) @binding(5) var<storage, read_write> scores: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let j = wg.x * 64u + t;
    let h = wg.y;
    let tok = wg.z;
    let row = seen[tok];
    if (j >= row.x) {
        return;
    }
    let pos = row.x - 1u;
    let kvh = h / (p.heads / p.kv_heads);
    let qb = (tok * p.heads + h) * p.head_dim;
    let slot = tables[row.y + j / 32u] * 32u + j % 32u;
    let kb = (slot * p.kv_heads + kvh) * p.head_dim;
    var acc = 0.0;
    for (var d = 0u; d < p.head_dim; d++) {
        acc += q[qb + d] * keys[kb + d];
    }
    var score = acc * p.scale;
    if (p.softcap > 0.0) {
        score = p.softcap * tanh(score / p.softcap);
    }
    if (p.window > 0u && j + p.window <= pos) {
        score = -3.0e38;
    }
    scores[(tok * p.heads + h) * p.stride + j] = score;
}
