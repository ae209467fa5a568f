//! libFuzzer target `server_request`: see `switchyard::harness::server_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::harness::server_request(data));
