// Block formats: the activations arrive quantized by quantize_q8.wgsl (per 32: 8-bit
// values q_x, scale dx, Σq_x), and the format's block_dot combines the exact integer
// dots of a block's packed bytes (elements 0-15 and 16-31) with its scales: for most
// formats d_w·dx·Σ q_w·q_x plus the correction c_w·(dx·Σq_x) (block_dot.wgsl). For the
// 32-weight formats that is the CPU's (and llama.cpp's) per-block arithmetic, summed in
// another order, which keeps the GPU within quantization noise of the CPU and llama.cpp
// (decision 27), not on the CPU's exact bits; the K-quants' activations are quantized
// per 256, as the CPU quantizes them (decision 151).
fn accumulate(col: u32, row0: u32, lane: u32, acc: ptr<function, array<f32, ROWS>>) {
    let blocks = p.k / 32u;
    let rows = min(ROWS, p.m - row0);
    for (var b = lane; b < blocks; b += LANES) {
        var wlo: vec4<u32>;
        var whi: vec4<u32>;
        let scales = block_load(col, b, blocks, &wlo, &whi);
        for (var r = 0u; r < rows; r++) {
            let xb = ((row0 + r) * blocks + b) * 3u;
            let lo = x[xb];
            let hi = x[xb + 1u];
            let dlo = dot4I8Packed(wlo.x, lo.x) + dot4I8Packed(wlo.y, lo.y)
                + dot4I8Packed(wlo.z, lo.z) + dot4I8Packed(wlo.w, lo.w);
            let dhi = dot4I8Packed(whi.x, hi.x) + dot4I8Packed(whi.y, hi.y)
                + dot4I8Packed(whi.z, hi.z) + dot4I8Packed(whi.w, hi.w);
            let scale = x[xb + 2u];
            let dx = bitcast<f32>(scale.x);
            let sum = f32(bitcast<i32>(scale.y));
            (*acc)[r] += block_dot(scales, dlo, dhi, dx, sum);
        }
    }
}
