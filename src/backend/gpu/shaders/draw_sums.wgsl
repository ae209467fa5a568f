// A draw's fourth pass, after draw_edit.wgsl, argmax_part.wgsl and draw_cut.wgsl: the
// sum of each chunk's weights (one workgroup of 256 threads a chunk of CHUNK logits (x)
// and row (y), as argmax_part.wgsl cut them), for the rows whose temperature is above
// 0; draw_pick.wgsl walks these sums.
const CHUNK: u32 = 4096u;

struct Params {
    width: u32,
    chunks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> parts: array<vec2<i32>>;
@group(0) @binding(3) var<storage, read> settings: array<u32>;
@group(0) @binding(4) var<storage, read> floors: array<u32>;
@group(0) @binding(5) var<storage, read_write> sums: array<f32>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y;
    let s = row_settings(row);
    let temperature = bitcast<f32>(s.x);
    let min_p = bitcast<f32>(s.y);
    let best_key = row_best(row, p.chunks);
    // A greedy row, or one with nothing above -inf, draws nothing.
    let live = temperature > 0.0 && best_key != total_key(0xff800000u);
    var sum = 0.0;
    if (live) {
        let best = bitcast<f32>(key_bits(best_key));
        let lowest = bitcast<f32>(floors[row]);
        let start = wg.x * CHUNK;
        let end = min(start + CHUNK, p.width);
        for (var i = start + t; i < end; i += 256u) {
            sum += weight(x[row * p.width + i], best, temperature, min_p, lowest);
        }
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) {
            partial[t] += partial[t + s];
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        sums[row * p.chunks + wg.x] = partial[0];
    }
}
