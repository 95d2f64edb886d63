//! Fuzz target: `structured_agents::api::fuzzing::chat_completions_body` (panics on a broken invariant).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    structured_agents::api::fuzzing::chat_completions_body(data);
});
