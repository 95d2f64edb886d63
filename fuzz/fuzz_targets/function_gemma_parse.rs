//! Fuzz target: `structured_agents::model::fuzzing::function_gemma_parse` (panics on a broken invariant).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    structured_agents::model::fuzzing::function_gemma_parse(data);
});
