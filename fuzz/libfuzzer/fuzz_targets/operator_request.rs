#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| swarm_fuzz_targets::operator_request(data));
