// Greedy decoding's pick per row of `width` logits: the index of the largest value in
// f32 total order after NaN -> -inf and +inf -> the largest finite value, ties to the
// lowest index, -1 where every value is -inf or NaN (the CPU's `greedy` rule). The
// logits are read as bits, so no float conversion can change a comparison. One
// workgroup of 256 threads per row, the rows folded over `groups_x` workgroups in x.
struct Params {
    width: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> picks: array<i32>;

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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y * p.groups_x + wg.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.width;
    // Each thread's best over its strided share; strict `>` keeps its lowest index.
    var best = total_key(0xff800000u);
    var at = 0xffffffffu;
    for (var i = t; i < p.width; i += 256u) {
        let k = total_key(x[base + i]);
        if (k > best || at == 0xffffffffu) {
            best = k;
            at = i;
        }
    }
    keys[t] = best;
    ids[t] = at;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) {
            let k = keys[t + s];
            let j = ids[t + s];
            if (k > keys[t] || (k == keys[t] && j < ids[t])) {
                keys[t] = k;
                ids[t] = j;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        if (keys[0] == total_key(0xff800000u)) {
            picks[row] = -1;
        } else {
            picks[row] = i32(ids[0]);
        }
    }
}
