// Top-k's and top-p's floor per row (decision 201, the CPU's `cut::floor`): one
// workgroup of 256 threads a row (the rows folded over `groups_x` workgroups in x)
// selects, a byte at a time from the highest, the largest order key whose tokens with
// all above it number at least k; then, among the tokens at or above it, the largest
// key whose tokens with all above it hold at least p of their weight, the weights
// counted in units of 2^-24 of the best's and summed exactly in 64 bits (two words), so
// the order of the additions does not matter. Writes the floor's value (-inf where
// nothing is cut, and for greedy rows) for draw_sums.wgsl and draw_pick.wgsl.
const WHOLE: u32 = 65536u;
const UNIT: f32 = 16777216.0;
const NO_DIGIT: u32 = 256u;

struct Params {
    width: u32,
    chunks: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> parts: array<vec2<i32>>;
@group(0) @binding(3) var<storage, read> settings: array<u32>;
@group(0) @binding(4) var<storage, read_write> floors: array<u32>;

// This pass's sums by the value of the key's byte, as low and high words.
var<workgroup> low: array<atomic<u32>, 256>;
var<workgroup> high: array<atomic<u32>, 256>;
var<workgroup> chosen: u32;
var<workgroup> shared_settings: vec3<u32>;
var<workgroup> shared_cut: vec2<u32>;
var<workgroup> shared_best: i32;

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn at_least(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y > b.y || (a.y == b.y && a.x >= b.x);
}

// a · 2^16 (a below 2^48).
fn shifted16(a: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x << 16u, (a.y << 16u) | (a.x >> 16u));
}

// a · m for m below 2^16 (the product below 2^64).
fn times16(a: vec2<u32>, m: u32) -> vec2<u32> {
    let l0 = (a.x & 0xffffu) * m;
    let l1 = (a.x >> 16u) * m;
    let lo = l0 + (l1 << 16u);
    return vec2<u32>(lo, a.y * m + (l1 >> 16u) + select(0u, 1u, lo < l0));
}

// A logit's place in value order as an unsigned integer (NaN as -inf).
fn order_key(bits: u32) -> u32 {
    return bitcast<u32>(total_key(bits)) ^ 0x80000000u;
}

// What a token counts in the selection: 1 when counting, else its weight in units
// (0 below the key `lowest`).
fn mass(bits: u32, key: u32, by_weight: bool, lowest: u32, best: f32, t: f32) -> u32 {
    if (!by_weight) {
        return 1u;
    }
    if (key < lowest) {
        return 0u;
    }
    return u32(unfloored(bits, best, t) * UNIT);
}

// The largest key whose tokens with all above it reach the goal: a count of `k`, or
// (by weight, among keys at or above `lowest`) p16 / 2^16 of their total weight;
// (key, 1), or (0, 0) where no key does. Every thread must call it, in uniform control
// flow.
fn highest_key(t: u32, r: u32, by_weight: bool, lowest: u32, k: u32, p16: u32, best: f32, temperature: f32) -> vec2<u32> {
    var prefix = 0u;
    var above = vec2<u32>(0u, 0u);
    var goal = vec2<u32>(k, 0u);
    for (var byte = 0u; byte < 4u; byte += 1u) {
        let shift = 24u - 8u * byte;
        atomicStore(&low[t], 0u);
        atomicStore(&high[t], 0u);
        workgroupBarrier();
        for (var i = t; i < p.width; i += 256u) {
            let bits = x[r * p.width + i];
            let key = order_key(bits);
            if (byte == 0u || (key >> (shift + 8u)) == (prefix >> (shift + 8u))) {
                let m = mass(bits, key, by_weight, lowest, best, temperature);
                let digit = (key >> shift) & 255u;
                let old = atomicAdd(&low[digit], m);
                if (old + m < old) {
                    atomicAdd(&high[digit], 1u);
                }
            }
        }
        workgroupBarrier();
        if (t == 0u) {
            if (by_weight && byte == 0u) {
                var total = vec2<u32>(0u, 0u);
                for (var d = 0u; d < 256u; d += 1u) {
                    total = add64(total, vec2<u32>(atomicLoad(&low[d]), atomicLoad(&high[d])));
                }
                goal = times16(total, p16);
            }
            var digit = NO_DIGIT;
            for (var d = 255i; d >= 0i; d -= 1i) {
                let bucket = vec2<u32>(atomicLoad(&low[d]), atomicLoad(&high[d]));
                let sum = add64(above, bucket);
                var reached = at_least(sum, goal);
                if (by_weight) {
                    reached = at_least(shifted16(sum), goal);
                }
                if (reached) {
                    digit = u32(d);
                    break;
                }
                above = sum;
            }
            chosen = digit;
        }
        let digit = workgroupUniformLoad(&chosen);
        if (digit == NO_DIGIT) {
            return vec2<u32>(0u, 0u);
        }
        prefix |= digit << shift;
    }
    return vec2<u32>(prefix, 1u);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg.y * p.groups_x + wg.x;
    let live_row = row < p.rows;
    let r = min(row, p.rows - 1u);
    if (t == 0u) {
        shared_settings = row_settings(r);
        shared_cut = row_cut(r);
        shared_best = row_best(r, p.chunks);
    }
    let s = workgroupUniformLoad(&shared_settings);
    let cut = workgroupUniformLoad(&shared_cut);
    let best_key = workgroupUniformLoad(&shared_best);
    let temperature = bitcast<f32>(s.x);
    let none = temperature <= 0.0 || best_key == total_key(0xff800000u)
        || (cut.x == 0u && cut.y >= WHOLE);
    var floor = 0xff800000u;
    if (!none) {
        let best = bitcast<f32>(key_bits(best_key));
        var lowest = vec2<u32>(0u, 0u);
        if (cut.x != 0u) {
            lowest = highest_key(t, r, false, 0u, cut.x, 0u, best, temperature);
        }
        var found = lowest;
        if (cut.y < WHOLE) {
            found = highest_key(t, r, true, lowest.x, 0u, max(cut.y, 1u), best, temperature);
        }
        if (found.y == 1u) {
            floor = key_bits(bitcast<i32>(found.x ^ 0x80000000u));
        }
    }
    if (t == 0u && live_row) {
        floors[r] = floor;
    }
}
