// Quantizes 32 activations into block `b` of `xq` as the CPU backend (and llama.cpp)
// quantize them: dx = max|x| / 127, q = round(x / dx) with ties to even. A block is
// three vec4<u32>: the 32 values as packed signed bytes (elements 0-15, then 16-31),
// then dx and Σq. Appended to every kernel that binds `xq`.
//
// For the 256-element K-quant formats the CPU takes max|x| over the whole super-block
// (ggml's Q8_K), so `group_abs_max` shares one maximum among `group` consecutive
// blocks (1, or 8): the blocks keep their layout and the integer sums match the CPU's.

var<workgroup> block_amax: array<f32, 256>;

fn block_abs_max(vals: ptr<function, array<f32, 32>>) -> f32 {
    var amax = 0.0;
    for (var e = 0u; e < 32u; e++) {
        amax = max(amax, abs((*vals)[e]));
    }
    return amax;
}

// The largest of the `group` block maxima around thread `slot` (its group: the slots
// `slot - slot % group` onwards). Every thread of the workgroup must call it, in
// uniform control flow, with `group` (uniform) dividing the workgroup size; a group of
// one block returns at once, without the barriers.
fn group_abs_max(own: f32, slot: u32, group: u32) -> f32 {
    if (group == 1u) {
        return own;
    }
    block_amax[slot] = own;
    workgroupBarrier();
    let first = slot - slot % group;
    var amax = 0.0;
    for (var i = 0u; i < group; i++) {
        amax = max(amax, block_amax[first + i]);
    }
    workgroupBarrier();
    return amax;
}

fn store_q8(vals: ptr<function, array<f32, 32>>, b: u32) {
    store_q8_scaled(vals, b, block_abs_max(vals));
}

// Block `b` with the scale amax / 127 (amax at least the block's own max|x|).
fn store_q8_scaled(vals: ptr<function, array<f32, 32>>, b: u32, amax: f32) {
    let dx = amax / 127.0;
    let inv = select(0.0, 127.0 / amax, amax != 0.0);
    var sum = 0;
    var words: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        var word = 0u;
        for (var j = 0u; j < 4u; j++) {
            let q = i32(round((*vals)[i * 4u + j] * inv));
            sum += q;
            word |= (bitcast<u32>(q) & 0xffu) << (j * 8u);
        }
        words[i] = word;
    }
    xq[b * 3u] = vec4<u32>(words[0], words[1], words[2], words[3]);
    xq[b * 3u + 1u] = vec4<u32>(words[4], words[5], words[6], words[7]);
    xq[b * 3u + 2u] = vec4<u32>(bitcast<u32>(dx), bitcast<u32>(sum), 0u, 0u);
}
