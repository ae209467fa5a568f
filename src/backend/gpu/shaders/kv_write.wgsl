// Writes a step's key and value rows into the paged KV pool of one layer: row r (a
// token at position pos of its sequence) goes to slot pos % 32 of block
// tables[base + pos / 32], where `seen[r] = (pos + 1, base)` (pos + 1 = 0: a padding
// row, written nowhere). For an f16 cache the values are rounded to f16 as the CPU
// stores them, so both backends attend over the same keys.
struct Params {
    len: u32,
    groups_x: u32,
    width: u32,
    round_f16: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seen: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> keys: array<f32>;
@group(0) @binding(6) var<storage, read_write> values: array<f32>;

// f32 to f16 bits, rounding to nearest with ties to even, in integer arithmetic:
// pack2x16float's rounding is left to the implementation, and the CPU's is this one.
fn f16_bits(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let e = i32((x >> 23u) & 0xffu);
    let m = x & 0x7fffffu;
    if (e == 255) {
        return sign | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u);
    }
    let he = e - 112;
    if (he >= 31) {
        return sign | 0x7c00u;
    }
    if (he <= 0) {
        if (he < -10) {
            return sign;
        }
        let full = m | 0x800000u;
        let shift = u32(14 - he);
        let half = 1u << (shift - 1u);
        let rem = full & ((half << 1u) - 1u);
        var hm = full >> shift;
        if (rem > half || (rem == half && (hm & 1u) != 0u)) {
            hm += 1u;
        }
        return sign | hm;
    }
    var h = sign | (u32(he) << 10u) | (m >> 13u);
    let rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
        h += 1u;
    }
    return h;
}

fn stored(v: f32) -> f32 {
    if (p.round_f16 != 0u) {
        return unpack2x16float(f16_bits(v)).x;
    }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.y * p.groups_x + wg.x) * 256u + t;
    if (i >= p.len) {
        return;
    }
    let row = seen[i / p.width];
    if (row.x == 0u) {
        return;
    }
    let pos = row.x - 1u;
    let block = tables[row.y + pos / 32u];
    let at = (block * 32u + pos % 32u) * p.width + i % p.width;
    keys[at] = stored(k[i]);
    values[at] = stored(v[i]);
}
