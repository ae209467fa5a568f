//! libFuzzer target `gguf`: see `switchyard::harness::gguf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::gguf(data));
