// How an f16 KV pool stores a pair of adjacent elements (appended to the kernels that
// write the pool): both rounded to f16 as the CPU rounds them, packed in one word,
// element i in the low half when i is even (what unpack2x16float reads as .x).
alias KvWord = u32;

fn store_pair(at: u32, k0: f32, k1: f32, v0: f32, v1: f32) {
    keys[at >> 1u] = f16_bits(k0) | (f16_bits(k1) << 16u);
    values[at >> 1u] = f16_bits(v0) | (f16_bits(v1) << 16u);
}

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
