// A draw's first pass: each row's logit edits (its bias and penalties), applied in
// order to the row's logits in place by one thread a row (the rows folded over
// `groups_x` workgroups in x), with the CPU's `edit::apply` arithmetic: the logit
// sanitized (NaN -> -inf, +inf -> the largest finite value), then `l + v` sanitized,
// `l / v` for a positive logit and `l * v` otherwise, or `l - v` sanitized. A row's
// settings (SETTINGS_WORDS words, a constant the host puts before this source) hold the
// edits' count at word 5, then three words an edit: id, operation, value bits.
struct Params {
    width: u32,
    rows: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<u32>;
@group(0) @binding(2) var<storage, read> settings: array<u32>;

fn sanitized(bits: u32) -> f32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(0xff800000u);
    }
    if (bits == 0x7f800000u) {
        return bitcast<f32>(0x7f7fffffu);
    }
    return bitcast<f32>(bits);
}

@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.y * p.groups_x + wg.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * SETTINGS_WORDS;
    let count = min(settings[base + 5u], (SETTINGS_WORDS - 6u) / 3u);
    for (var e = 0u; e < count; e += 1u) {
        let at = base + 6u + 3u * e;
        let id = settings[at];
        if (id >= p.width) {
            continue;
        }
        let l = sanitized(x[row * p.width + id]);
        let v = bitcast<f32>(settings[at + 2u]);
        var out = l;
        switch settings[at + 1u] {
            case 0u: {
                out = sanitized(bitcast<u32>(l + v));
            }
            case 1u: {
                out = select(l * v, l / v, l > 0.0);
            }
            default: {
                out = sanitized(bitcast<u32>(l - v));
            }
        }
        x[row * p.width + id] = bitcast<u32>(out);
    }
}
