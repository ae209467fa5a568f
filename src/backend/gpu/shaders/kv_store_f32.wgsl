// How an f32 KV pool stores a pair of adjacent elements (appended to the kernels that
// write the pool): as they are, one word each.
alias KvWord = f32;

fn store_pair(at: u32, k0: f32, k1: f32, v0: f32, v1: f32) {
    keys[at] = k0;
    keys[at + 1u] = k1;
    values[at] = v0;
    values[at + 1u] = v1;
}
