// The greedy rule's comparison, shared by argmax_part.wgsl, argmax.wgsl and the draw's
// kernels (each declares `parts`, the chunks' bests): logits are read as bits and
// compared as total-order keys after NaN -> -inf and +inf -> the largest finite value,
// ties to the lowest index (the CPU's `greedy` rule). A workgroup of 256 threads
// reduces its candidates in `keys`/`ids`; `NONE` is "no index yet".
const NONE: u32 = 0xffffffffu;

var<workgroup> keys: array<i32, 256>;
var<workgroup> ids: array<u32, 256>;

// The sanitized value's place in total order, as an i32 that orders the same way.
fn total_key(bits: u32) -> i32 {
    var b = bits;
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        b = 0xff800000u; // NaN -> -inf
    } else if (b == 0x7f800000u) {
        b = 0x7f7fffffu; // +inf -> f32::MAX
    }
    let s = bitcast<i32>(b);
    return s ^ bitcast<i32>(bitcast<u32>(s >> 31u) >> 1u);
}

// Whether candidate (k, j) beats (best, at): a larger key, or the same key at a lower
// index; anything beats `NONE`.
fn beats(k: i32, j: u32, best: i32, at: u32) -> bool {
    return j != NONE && (at == NONE || k > best || (k == best && j < at));
}

// The workgroup's best of every thread's (best, at), left in keys[0] and ids[0]. Every
// thread must call it, in uniform control flow.
fn reduce_best(t: u32, best: i32, at: u32) {
    keys[t] = best;
    ids[t] = at;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s && beats(keys[t + s], ids[t + s], keys[t], ids[t])) {
            keys[t] = keys[t + s];
            ids[t] = ids[t + s];
        }
        workgroupBarrier();
    }
}

// Row `row`'s greedy pick from its `chunks` chunk bests in `parts`, -1 where every
// logit is -inf or NaN (the same in every thread). Every thread must call it, in
// uniform control flow.
fn greedy_of_parts(t: u32, row: u32, chunks: u32) -> i32 {
    var best = 0;
    var at = NONE;
    for (var c = t; c < chunks; c += 256u) {
        let part = parts[row * chunks + c];
        if (beats(part.x, bitcast<u32>(part.y), best, at)) {
            best = part.x;
            at = bitcast<u32>(part.y);
        }
    }
    reduce_best(t, best, at);
    return select(i32(ids[0]), -1, keys[0] == total_key(0xff800000u));
}
