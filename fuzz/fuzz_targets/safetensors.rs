//! libFuzzer target `safetensors`: see `switchyard::harness::safetensors`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::safetensors(data));
