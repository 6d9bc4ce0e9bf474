#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| swarm_fuzz_targets::mcp_arguments(data));
