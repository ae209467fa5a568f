// Q5_0's and Q5_1's fifth bits: the 4 low bits of each component of `bits` moved to
// bit 4 of that component's 4 bytes (bit i to byte i), to OR onto 4 packed nibbles.
fn fifth_bits(bits: vec4<u32>) -> vec4<u32> {
    let b = bits & vec4<u32>(0xfu);
    let spread = (b & vec4<u32>(1u)) | ((b & vec4<u32>(2u)) << vec4<u32>(7u))
        | ((b & vec4<u32>(4u)) << vec4<u32>(14u)) | ((b & vec4<u32>(8u)) << vec4<u32>(21u));
    return spread << vec4<u32>(4u);
}
