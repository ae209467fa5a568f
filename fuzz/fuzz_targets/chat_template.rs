//! libFuzzer target `chat_template`: see `switchyard::harness::chat_template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::chat_template(data));
