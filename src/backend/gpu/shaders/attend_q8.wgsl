// The attention output quantized for the block-format product that alone reads it: the
// head's values (as attend_out.wgsl would store them) gathered in workgroup memory,
// then one thread per block of 32 quantizes them (q8_block.wgsl) at the block the row
// `[n, heads · head_dim]` layout puts them.
@group(0) @binding(6) var<storage, read_write> xq: array<vec4<u32>>;

var<workgroup> head_out: array<f32, 256>;

fn store_out(tok: u32, h: u32, t: u32, acc: vec4<f32>, inv: f32) {
    for (var u = 0u; u < 4u; u++) {
        let d = t + u * 64u;
        if (d < p.head_dim) {
            head_out[d] = acc[u] * inv;
        }
    }
    workgroupBarrier();
    let blocks = p.head_dim / 32u;
    if (t < blocks) {
        var vals: array<f32, 32>;
        for (var e = 0u; e < 32u; e++) {
            vals[e] = head_out[t * 32u + e];
        }
        store_q8(&vals, (tok * p.heads + h) * blocks + t);
    }
}
