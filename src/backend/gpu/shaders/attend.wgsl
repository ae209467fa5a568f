// Attention of every query row over its sequence's cached keys and values in one
// kernel: one workgroup of 64 threads per (head, row) walks the positions the row sees
// (`seen[t].x` of them, through its block table; none for a padding row, whose output
// is zero) 64 at a time, each thread scoring one position, and keeps a running
// maximum, sum and weighted sum of values (online softmax), so no score is ever
// stored. Scores are scale · q·k, soft-capped to c · tanh(s / c) when c > 0; with a
// sliding window w > 0, positions j <= position - w get -3e38 (probability zero).
// Grouped-query heads share a kv head. Each thread accumulates head dimensions
// t, t + 64, t + 128 and t + 192 (head_dim <= 256, even); `store_out` (attend_out.wgsl
// or attend_q8.wgsl) writes the head's values times `inv`; `key_pair` and `value_at`
// (kv_load_f32.wgsl or kv_load_f16.wgsl) read the pool as its type holds values.
struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
    window: u32,
    softcap: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> q: array<f32>;
@group(0) @binding(4) var<storage, read> keys: array<KvWord>;
@group(0) @binding(5) var<storage, read> values: array<KvWord>;

var<workgroup> qs: array<f32, 256>;
var<workgroup> probs: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

fn reduce_max(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] = max(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn reduce_sum(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let tok = wg.y;
    let row = seen[tok];
    let len = row.x;
    let kvh = h / (p.heads / p.kv_heads);
    let qb = (tok * p.heads + h) * p.head_dim;
    for (var d = t; d < p.head_dim; d += 64u) {
        qs[d] = q[qb + d];
    }
    workgroupBarrier();
    var m = -3.0e38;
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var c0 = 0u; c0 < len; c0 += 64u) {
        let j = c0 + t;
        var score = -3.0e38;
        if (j < len) {
            let slot = tables[row.y + j / 32u] * 32u + j % 32u;
            let kb = (slot * p.kv_heads + kvh) * p.head_dim;
            var dot = 0.0;
            for (var d = 0u; d < p.head_dim; d += 2u) {
                let kp = key_pair(kb + d);
                dot += qs[d] * kp.x;
                dot += qs[d + 1u] * kp.y;
            }
            score = dot * p.scale;
            if (p.softcap > 0.0) {
                score = p.softcap * tanh(score / p.softcap);
            }
            if (p.window > 0u && j + p.window <= len - 1u) {
                score = -3.0e38;
            }
        }
        let top = max(m, reduce_max(t, score));
        let e = select(0.0, exp(score - top), j < len);
        probs[t] = e;
        let alpha = exp(m - top);
        l = l * alpha + reduce_sum(t, e);
        acc *= alpha;
        m = top;
        let count = min(64u, len - c0);
        for (var jj = 0u; jj < count; jj++) {
            let jpos = c0 + jj;
            let slot = tables[row.y + jpos / 32u] * 32u + jpos % 32u;
            let vb = (slot * p.kv_heads + kvh) * p.head_dim;
            let pj = probs[jj];
            for (var u = 0u; u < 4u; u++) {
                let d = t + u * 64u;
                if (d < p.head_dim) {
                    acc[u] += pj * value_at(vb + d);
                }
            }
        }
        workgroupBarrier();
    }
    store_out(tok, h, t, acc, select(0.0, 1.0 / l, l > 0.0));
}
