// A draw's pick per row (one workgroup of 256 threads a row, the rows folded over
// `groups_x` workgroups in x): at temperature 0 the greedy pick of the row's chunk
// bests (argmax.wgsl's rule); else the token at the uniform point bits / 2^32 of the
// total of the weights (0 below min-p and the floor draw_cut.wgsl set) by inverse CDF,
// walking the chunks' sums (draw_sums.wgsl), then the 256 spans of 16 logits of the
// chunk that holds the point, then the logits of the span that holds it. A point past
// every span (rounding) takes the last token of weight. -1 where every logit is -inf
// or NaN.
const CHUNK: u32 = 4096u;
const SPAN: u32 = 16u;

struct Params {
    width: u32,
    chunks: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> parts: array<vec2<i32>>;
@group(0) @binding(3) var<storage, read> settings: array<u32>;
@group(0) @binding(4) var<storage, read> floors: array<u32>;
@group(0) @binding(5) var<storage, read> sums: array<f32>;
@group(0) @binding(6) var<storage, read_write> picks: array<i32>;

var<workgroup> spans: array<f32, 256>;
var<workgroup> chunk_at: u32;
var<workgroup> point: f32;
var<workgroup> last_positive: atomic<u32>;
var<workgroup> shared_settings: vec3<u32>;
var<workgroup> shared_best: i32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y * p.groups_x + wg.x;
    let live_row = row < p.rows;
    let r = min(row, p.rows - 1u);
    // The row's settings and best, read once and shared as workgroup-uniform values,
    // so every thread takes the same branches and reaches the barriers below.
    if (t == 0u) {
        shared_settings = row_settings(r);
        shared_best = row_best(r, p.chunks);
    }
    let s = workgroupUniformLoad(&shared_settings);
    let best_key = workgroupUniformLoad(&shared_best);
    let temperature = bitcast<f32>(s.x);
    let min_p = bitcast<f32>(s.y);
    if (temperature <= 0.0) {
        // Greedy: argmax.wgsl's pick over the chunk bests.
        let pick = greedy_of_parts(t, r, p.chunks);
        if (t == 0u && live_row) {
            picks[r] = pick;
        }
        return;
    }
    if (best_key == total_key(0xff800000u)) {
        if (t == 0u && live_row) {
            picks[r] = -1;
        }
        return;
    }
    let best = bitcast<f32>(key_bits(best_key));
    let lowest = bitcast<f32>(floors[r]);
    if (t == 0u) {
        var total = 0.0;
        for (var c = 0u; c < p.chunks; c += 1u) {
            total += sums[r * p.chunks + c];
        }
        var left = f32(s.z) / 4294967296.0 * total;
        var found = p.chunks;
        var last = 0u;
        for (var c = 0u; c < p.chunks; c += 1u) {
            let sum = sums[r * p.chunks + c];
            if (left < sum) {
                found = c;
                break;
            }
            left -= sum;
            if (sum > 0.0) {
                last = c;
            }
        }
        if (found == p.chunks) {
            found = last;
            left = bitcast<f32>(0x7f7fffffu);
        }
        chunk_at = found;
        point = left;
        atomicStore(&last_positive, 0u);
    }
    let chunk = workgroupUniformLoad(&chunk_at);
    let target_point = workgroupUniformLoad(&point);
    let first = chunk * CHUNK + t * SPAN;
    let end = min(min(first + SPAN, (chunk + 1u) * CHUNK), p.width);
    var mine = 0.0;
    for (var i = first; i < end; i += 1u) {
        let w = weight(x[r * p.width + i], best, temperature, min_p, lowest);
        mine += w;
        if (w > 0.0) {
            atomicMax(&last_positive, i + 1u);
        }
    }
    // Inclusive prefix sums of the spans' weights.
    spans[t] = mine;
    workgroupBarrier();
    for (var step = 1u; step < 256u; step <<= 1u) {
        var add = 0.0;
        if (t >= step) {
            add = spans[t - step];
        }
        workgroupBarrier();
        spans[t] += add;
        workgroupBarrier();
    }
    var before = 0.0;
    if (t > 0u) {
        before = spans[t - 1u];
    }
    if (target_point >= before && target_point < spans[t] && live_row) {
        var left = target_point - before;
        var pick = end - 1u;
        for (var i = first; i < end; i += 1u) {
            let w = weight(x[r * p.width + i], best, temperature, min_p, lowest);
            if (w > 0.0) {
                pick = i;
                if (left < w) {
                    break;
                }
                left -= w;
            }
        }
        picks[r] = i32(pick);
    }
    workgroupBarrier();
    if (t == 0u && live_row && target_point >= spans[255]) {
        picks[r] = i32(atomicLoad(&last_positive)) - 1;
    }
}
