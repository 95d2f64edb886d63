//! Fuzz target: `structured_agents::model::fuzzing::native_fallback` (panics on a broken invariant).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    structured_agents::model::fuzzing::native_fallback(data);
});
