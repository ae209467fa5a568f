//! libFuzzer target `tokenizer`: see `switchyard::harness::tokenizer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::tokenizer(data));
