//! The API fuzz targets' bodies (`api::fuzzing`: the `POST /v1/jobs` and
//! `POST /v1/chat/completions` body parsers) on random input, so the
//! stable-toolchain test suite exercises them too: arbitrary bytes, JSON
//! made of the requests' own keys and values, and the seeds in
//! `fuzz/seeds-api`. The real fuzzer (`fuzz/`, cargo-fuzz) explores further;
//! see ci/grammar-check.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use proptest::prelude::*;
use structured_agents::api::fuzzing;

/// Fragments that steer random input into the parsers' interesting states.
fn json_soup() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("{"),
        Just("}"),
        Just("["),
        Just("]"),
        Just(","),
        Just(":"),
        Just("\""),
        Just("\"bundle\""),
        Just("\"input\""),
        Just("\"variables\""),
        Just("\"priority\""),
        Just("\"run_at\""),
        Just("\"idempotency_key\""),
        Just("\"max_attempts\""),
        Just("\"traceparent\""),
        Just("\"conversation_id\""),
        Just("\"jobs\""),
        Just("\"model\""),
        Just("\"bundle/echo\""),
        Just("\"messages\""),
        Just("\"role\""),
        Just("\"user\""),
        Just("\"content\""),
        Just("\"tool_calls\""),
        Just("\"stream\""),
        Just("\"2026-01-01T00:00:00Z\""),
        Just("\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\""),
        Just("\" \""),
        Just("0"),
        Just("-1"),
        Just("4294967296"),
        Just("1e999"),
        Just("true"),
        Just("null"),
        Just("\"\\u0000\""),
        Just("\"\\ud800\""),
        Just("é"),
    ];
    proptest::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("SA_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1000)
    ))]

    #[test]
    fn body_parsers_survive_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::submit_body(&data);
        fuzzing::chat_completions_body(&data);
    }

    #[test]
    fn body_parsers_survive_json_soup(text in json_soup()) {
        fuzzing::submit_body(text.as_bytes());
        fuzzing::chat_completions_body(text.as_bytes());
    }
}

#[test]
fn body_parsers_accept_and_refuse_the_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds-api");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        fuzzing::submit_body(&data);
        fuzzing::chat_completions_body(&data);
        seen += 1;
    }
    assert!(seen >= 5, "the seeds in {} are missing", dir.display());
}
