// Activations quantized once per row and block of 32 for the block-format matmul, as
// the CPU backend (and llama.cpp) quantize them: dx = max|x| / 127, q = round(x / dx)
// with ties to even. A block is three vec4<u32>: the 32 values as packed signed bytes
// (elements 0-15, then 16-31), then dx and Σq.
struct Params {
    len: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> xq: array<vec4<u32>>;

fn pack(xb: u32, inv: f32, sum: ptr<function, i32>) -> u32 {
    var word = 0u;
    for (var j = 0u; j < 4u; j++) {
        let q = i32(round(x[xb + j] * inv));
        *sum += q;
        word |= (bitcast<u32>(q) & 0xffu) << (j * 8u);
    }
    return word;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let b = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (b >= p.len) {
        return;
    }
    let xb = b * 32u;
    var amax = 0.0;
    for (var e = 0u; e < 32u; e++) {
        amax = max(amax, abs(x[xb + e]));
    }
    let dx = amax / 127.0;
    let inv = select(0.0, 127.0 / amax, amax != 0.0);
    var sum = 0;
    var words: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        words[i] = pack(xb + i * 4u, inv, &sum);
    }
    xq[b * 3u] = vec4<u32>(words[0], words[1], words[2], words[3]);
    xq[b * 3u + 1u] = vec4<u32>(words[4], words[5], words[6], words[7]);
    xq[b * 3u + 2u] = vec4<u32>(bitcast<u32>(dx), bitcast<u32>(sum), 0u, 0u);
}
