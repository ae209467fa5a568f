//! libFuzzer target `hf_config`: see `switchyard::harness::hf_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::hf_config(data));
