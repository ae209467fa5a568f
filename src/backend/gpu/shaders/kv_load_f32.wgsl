// How attention reads an f32 KV pool: element `i` as it is.
alias KvWord = f32;

// Elements i and i + 1 (i even) of the keys.
fn key_pair(i: u32) -> vec2<f32> {
    return vec2<f32>(keys[i], keys[i + 1u]);
}

fn value_at(i: u32) -> f32 {
    return values[i];
}
