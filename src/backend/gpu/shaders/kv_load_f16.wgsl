// How attention reads an f16 KV pool: two elements a word, element i in half i % 2
// (unpack2x16float's .x is the low half), widened exactly to f32.
alias KvWord = u32;

// Elements i and i + 1 (i even) of the keys.
fn key_pair(i: u32) -> vec2<f32> {
    return unpack2x16float(keys[i >> 1u]);
}

fn value_at(i: u32) -> f32 {
    return unpack2x16float(values[i >> 1u])[i & 1u];
}
