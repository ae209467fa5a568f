// The attention output as f32 rows `[n, heads · head_dim]`.
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

fn store_out(tok: u32, h: u32, t: u32, acc: vec4<f32>, inv: f32) {
    for (var u = 0u; u < 4u; u++) {
        let d = t + u * 64u;
        if (d < p.head_dim) {
            out[(tok * p.heads + h) * p.head_dim + d] = acc[u] * inv;
        }
    }
}
