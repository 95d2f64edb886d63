//! The fuzz targets' bodies (`model::fuzzing`) on random input, so the
//! stable-toolchain test suite exercises them too: arbitrary bytes, and
//! structured noise made of the tokens the parsers look for. The real
//! fuzzer (`fuzz/`, cargo-fuzz) explores further; see ci/grammar-check.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use proptest::prelude::*;
use structured_agents::model::fuzzing;

/// Fragments that steer random input into the parsers' interesting states.
fn tokens() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("<tool_call>"),
        Just("</tool_call>"),
        Just("<function="),
        Just("</function>"),
        Just("<parameter="),
        Just("</parameter>"),
        Just("<start_function_call>"),
        Just("<end_function_call>"),
        Just("call:"),
        Just("<escape>"),
        Just("{"),
        Just("}"),
        Just("["),
        Just("]"),
        Just(","),
        Just(":"),
        Just("\""),
        Just("\n"),
        Just("add"),
        Just("a"),
        Just(">"),
        Just("1"),
        Just("\"name\""),
        Just("\"arguments\""),
        Just("true"),
        Just("null"),
        Just("é"),
        Just("\u{c}"),
        Just("\t"),
        Just("\r"),
        Just(" "),
    ];
    proptest::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("SA_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1000)
    ))]

    #[test]
    fn parsers_survive_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::qwen_parse(&data);
        fuzzing::function_gemma_parse(&data);
        fuzzing::native_fallback(&data);
    }

    #[test]
    fn parsers_survive_token_soup(text in tokens()) {
        fuzzing::qwen_parse(text.as_bytes());
        fuzzing::function_gemma_parse(text.as_bytes());
        fuzzing::native_fallback(text.as_bytes());
    }
}
