// Greedy decoding's first pass: each row of `width` logits is cut into chunks of
// CHUNK values, one workgroup of 256 threads a chunk (x) and row (y), so a long
// vocabulary is read by many workgroups at once; each writes its chunk's best
// (key, index) to `parts[row · chunks + chunk]` for argmax.wgsl to finish.
const CHUNK: u32 = 4096u;

struct Params {
    width: u32,
    chunks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> parts: array<vec2<i32>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y;
    let start = wg.x * CHUNK;
    let end = min(start + CHUNK, p.width);
    var best = 0;
    var at = NONE;
    for (var i = start + t; i < end; i += 256u) {
        let k = total_key(x[row * p.width + i]);
        if (beats(k, i, best, at)) {
            best = k;
            at = i;
        }
    }
    reduce_best(t, best, at);
    if (t == 0u) {
        parts[row * p.chunks + wg.x] = vec2<i32>(keys[0], bitcast<i32>(ids[0]));
    }
}
