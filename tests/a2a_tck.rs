//! The official A2A TCK (`a2aproject/a2a-tck`, vendored in
//! `tests/vendor/a2a-tck`, see its VENDORED.md) at its MUST level against
//! the daemon: a daemon with API keys and one bundle, answered by the mock
//! model server, and the kit's pytest run as `run_tck.py --category
//! mandatory --transports jsonrpc` builds it, with a JSON report. Every
//! MUST test passes except those listed in [`EXCEPTIONS`], each with the
//! outcome it has and the reason; `docs/api.md` (The A2A TCK) lists the
//! same tests and gives the figure, and this test holds the page to both.
//! A test outside the list that does not pass (a new one included) and a
//! listed one whose outcome changed (it passes now: take it off) both fail
//! here. The kit's Python is `.venv-tck` (`scripts/python-env`,
//! ci/requirements-tck.txt).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use common::daemon::{Site, new_key};
use common::{mock_server, python_tck, repo};
use serde_json::Value;

/// Where the kit is, in the repository.
const TCK: &str = "tests/vendor/a2a-tck";

/// The page that lists the exceptions, and its section.
const DOC: &str = "docs/api.md";
const SECTION: &str = "### The A2A TCK";

/// The longest the kit may take (it takes about a minute and a half, most
/// of it in the waits of the tests listed with [`STILL_WORKING`]).
const DEADLINE: Duration = Duration::from_secs(600);

/// What a listed test comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Failed,
    Skipped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

use Outcome::{Failed, Skipped};

// The reasons, each cited from A2A 1.0 (the specification the kit carries,
// current_spec/specification.md of the same commit).

const STILL_WORKING: &str = "its helper `create_test_task` sends `SendMessage` without a configuration, then waits 5 s for `GetTask` to say `TASK_STATE_WORKING`; but without `returnImmediately` \"the operation MUST wait until the task reaches a terminal (…) or interrupted (…) state before returning\" (§3.2.2), so the task has already ended (an agent that keeps it WORKING answered too early)";
const CANCEL_ENDED: &str = "cancels the task that a `SendMessage` without `returnImmediately` returned, which waited for its end (§3.2.2); an ended task is not cancelable, `TaskNotCancelableError` (§3.1.5), which the daemon answers";
const CONTINUE_ENDED: &str = "sends a second message to the task that a `SendMessage` without `returnImmediately` returned, which waited for its end (§3.2.2); \"Messages sent to Tasks that are in a terminal state (…) cannot accept further messages\", `UnsupportedOperationError` (§3.1.1), which the daemon answers";
const PAGE_SIZE: &str = "takes `pageSize` for the number of tasks on the page (0 when none, `totalSize` when under 50); A2A 1.0 has it \"the page size used for this response\" (`ListTasksResponse`) and its examples answer `\"pageSize\": 10` with one task (§6.5): the daemon answers the size asked, 50 by default";
const V03_RESULT: &str = "reads the task id from `SendMessage`'s result as v0.3 had it (`result.id`); A2A 1.0 answers `{\"task\": {…}}` (`SendMessageResponse`, §3.1.1), so the kit finds no id and skips";
const HTTPS: &str = "applies to an `https://` agent; the daemon serves plain HTTP (TLS is for a proxy in front of it), and the kit skips these for an `http://` URL";
const PUSH_SUPPORTED: &str = "`PushNotificationNotSupportedError` is for an agent without push notifications; the daemon has them (its card says `pushNotifications: true`)";
const NO_32004: &str = "tries to provoke `UnsupportedOperationError` with streaming (the daemon streams), unknown configuration fields and output modes (taken: agents \"SHOULD use\" `acceptedOutputModes` \"to tailor their output\", `SendMessageConfiguration`) and an unknown method (`-32601`, as JSON-RPC wants), and skips when none gives `-32004`; the daemon's `-32004` answers (a message to an ended task, `GetExtendedAgentCard` without keys) are in tests/a2a.rs";
const NO_32005: &str = "sends its file as v0.3's `file` part, which A2A 1.0 has not (a part is `text`, `raw`, `url` or `data`, §4.1.6), so the daemon answers `-32602`; and an unsupported output mode, which agents \"SHOULD use\" (`SendMessageConfiguration`), not refuse; the kit skips. A 1.0 file part (`raw`, `url`) is `-32005`, tests/a2a.rs";
const NO_32006: &str = "`InvalidAgentResponseError` is internal: the kit says it cannot be triggered from outside, and always skips";
const ONE_TRANSPORT: &str =
    "needs two transports; the daemon serves JSON-RPC only, and its card declares only `JSONRPC`";
const NO_OAUTH2: &str =
    "for a card with an OAuth 2.0 scheme; the daemon's keys are bearer tokens (its one scheme)";
const NO_MTLS: &str =
    "for a card with a mutual-TLS scheme; the daemon's keys are bearer tokens (its one scheme)";
const NO_AUTH_REQUIRED: &str = "needs a task that asks for more authentication as it runs (`TASK_STATE_AUTH_REQUIRED`), a behaviour of the kit's own scripted agent; no bundle does, a call is authorized by its API key";
const WRONG_KEY: &str = "reads `authentication_schemes` from its fixture, which fills `security_schemes`, so it skips whatever the card declares (here a bearer scheme); a missing or wrong key is checked by `authentication/test_auth_enforcement.py`, which passes";

/// The MUST tests that do not pass (the kit's node ids under
/// `tests/mandatory/`), each with its outcome and why.
const EXCEPTIONS: &[(&str, Outcome, &str)] = &[
    (
        "protocol/test_a2a_v030_new_methods.py::TestMethodMappingCompliance::test_core_method_mapping_compliance",
        Failed,
        CANCEL_ENDED,
    ),
    (
        "protocol/test_tasks_cancel_method.py::test_tasks_cancel_valid",
        Failed,
        CANCEL_ENDED,
    ),
    (
        "protocol/test_message_send_method.py::test_message_send_continue_task",
        Failed,
        CONTINUE_ENDED,
    ),
    (
        "protocol/test_state_transitions.py::test_task_history_length",
        Failed,
        CONTINUE_ENDED,
    ),
    (
        "protocol/test_tasks_list_method.py::TestBasicListing::test_list_all_tasks",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestBasicListing::test_list_tasks_validates_required_fields",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestBasicListing::test_list_tasks_sorted_by_timestamp_descending",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestFiltering::test_filter_by_context_id",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestFiltering::test_filter_by_status",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestFiltering::test_filter_by_last_updated_after",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestFiltering::test_combined_filters",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestPagination::test_custom_page_size",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestPagination::test_page_token_navigation",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestPagination::test_last_page_detection",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestPagination::test_total_size_accuracy",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestHistoryLimiting::test_history_length_zero",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestHistoryLimiting::test_history_length_custom",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestHistoryLimiting::test_history_length_exceeds_actual",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestArtifactInclusion::test_artifacts_excluded_by_default",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestArtifactInclusion::test_artifacts_included_when_requested",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestEdgeCasesAndErrors::test_default_page_size_is_50",
        Failed,
        STILL_WORKING,
    ),
    (
        "protocol/test_tasks_list_method.py::TestBasicListing::test_list_tasks_empty_when_none_exist",
        Failed,
        PAGE_SIZE,
    ),
    (
        "protocol/test_tasks_list_method.py::TestPagination::test_default_page_size",
        Failed,
        PAGE_SIZE,
    ),
    (
        "transport/test_multi_transport_equivalence.py::test_task_retrieval_equivalence",
        Skipped,
        V03_RESULT,
    ),
    (
        "security/test_in_task_authentication.py::test_auth_state_transitions",
        Skipped,
        V03_RESULT,
    ),
    (
        "security/test_in_task_authentication.py::test_in_task_authentication_workflow",
        Skipped,
        NO_AUTH_REQUIRED,
    ),
    (
        "security/test_in_task_authentication.py::test_invalid_authentication_handling",
        Skipped,
        WRONG_KEY,
    ),
    (
        "authentication/test_auth_compliance_v030.py::test_oauth2_metadata_url_validation",
        Skipped,
        NO_OAUTH2,
    ),
    (
        "authentication/test_auth_compliance_v030.py::test_mutual_tls_scheme_declaration",
        Skipped,
        NO_MTLS,
    ),
    (
        "jsonrpc/test_a2a_error_codes.py::test_push_notification_not_supported_error_32003",
        Skipped,
        PUSH_SUPPORTED,
    ),
    (
        "jsonrpc/test_a2a_error_codes_enhanced.py::test_push_notification_not_supported_error_32003_enhanced",
        Skipped,
        PUSH_SUPPORTED,
    ),
    (
        "jsonrpc/test_a2a_error_codes.py::test_unsupported_operation_error_32004",
        Skipped,
        NO_32004,
    ),
    (
        "jsonrpc/test_a2a_error_codes_enhanced.py::test_unsupported_operation_error_32004_enhanced",
        Skipped,
        NO_32004,
    ),
    (
        "jsonrpc/test_a2a_error_codes.py::test_content_type_not_supported_error_32005",
        Skipped,
        NO_32005,
    ),
    (
        "jsonrpc/test_a2a_error_codes_enhanced.py::test_content_type_not_supported_error_32005_enhanced",
        Skipped,
        NO_32005,
    ),
    (
        "jsonrpc/test_a2a_error_codes.py::test_invalid_agent_response_error_32006",
        Skipped,
        NO_32006,
    ),
    (
        "jsonrpc/test_a2a_error_codes_enhanced.py::test_invalid_agent_response_error_32006_enhanced",
        Skipped,
        NO_32006,
    ),
    (
        "protocol/test_a2a_v030_transport_compliance.py::test_multi_transport_method_mapping",
        Skipped,
        ONE_TRANSPORT,
    ),
    (
        "security/test_certificate_validation.py::test_certificate_chain_trust_validation",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_certificate_validation.py::test_hostname_verification",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_certificate_validation.py::test_certificate_revocation_status",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_certificate_validation.py::test_invalid_certificate_rejection",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_certificate_validation.py::test_certificate_security_headers",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_tls_configuration_enhanced.py::test_tls_protocol_version_security",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_tls_configuration_enhanced.py::test_cipher_suite_security_analysis",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_tls_configuration_enhanced.py::test_certificate_chain_validation",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_tls_configuration_enhanced.py::test_tls_security_features",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_tls_configuration_enhanced.py::test_tls_implementation_best_practices",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_transport_security.py::test_https_required_production",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_transport_security.py::test_tls_certificate_validation",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_transport_security.py::test_tls_configuration_security",
        Skipped,
        HTTPS,
    ),
    (
        "security/test_transport_security.py::test_http_to_https_redirect",
        Skipped,
        HTTPS,
    ),
];

/// One test of the kit's report: its outcome and, when it did not pass,
/// what the kit said.
#[derive(Debug)]
struct Ran {
    outcome: String,
    said: String,
}

/// Runs the kit's MUST level against the interface at `sut`, presenting
/// `token`: the report's tests by id (under `tests/mandatory/`).
fn run_tck(sut: &str, token: &str, log: impl Fn() -> String) -> BTreeMap<String, Ran> {
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(python_tck());
    command
        .current_dir(repo(TCK))
        .args(["-m", "pytest", "tests/mandatory/"])
        .arg(format!("--sut-url={sut}"))
        // What `run_tck.py --category mandatory --transports jsonrpc` runs.
        .args(["--test-scope=all", "--tb=short", "-q"])
        .args(["-m", "mandatory or mandatory_protocol or mandatory_jsonrpc"])
        .args(["--transport-strategy", "agent_preferred"])
        .args(["--transports", "jsonrpc", "--enable-equivalence-testing"])
        .arg("--json-report")
        .arg(format!("--json-report-file={}", report.path().display()))
        // Nothing written into the vendored kit, and no warning noise.
        .args(["-p", "no:cacheprovider"])
        .args(["-o", "asyncio_default_fixture_loop_scope=function"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("A2A_AUTH_TYPE", "bearer")
        .env("A2A_AUTH_TOKEN", token)
        .env("TCK_STREAMING_TIMEOUT", "2.0");
    for variable in [
        "A2A_AUTH_HEADERS",
        "A2A_AUTH_HEADER",
        "A2A_TRANSPORT_STRATEGY",
        "A2A_PREFERRED_TRANSPORT",
        "A2A_DISABLED_TRANSPORTS",
        "SUT_URL",
    ] {
        command.env_remove(variable);
    }
    // Files, not pipes: nothing reads a pipe while the kit runs.
    command
        .stdout(out.reopen().unwrap())
        .stderr(out.reopen().unwrap());
    let status = within(command, DEADLINE);
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "the kit wrote no report ({e}; {status}):\n{}\ndaemon log:\n{}",
            std::fs::read_to_string(out.path()).unwrap_or_default(),
            log()
        )
    });
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|test| {
            let id = test["nodeid"].as_str().unwrap();
            let id = id.strip_prefix("tests/mandatory/").unwrap_or(id);
            let ran = Ran {
                outcome: test["outcome"].as_str().unwrap().to_string(),
                said: said(test),
            };
            (id.to_string(), ran)
        })
        .collect()
}

/// What the kit said of a test that did not pass: its failure or its
/// reason to skip, from the first phase that did not pass.
fn said(test: &Value) -> String {
    ["setup", "call", "teardown"]
        .iter()
        .map(|phase| &test[phase])
        .find(|phase| phase["outcome"].as_str().is_some_and(|o| o != "passed"))
        .map(|phase| match phase["crash"]["message"].as_str() {
            Some(message) => message.to_string(),
            None => phase["longrepr"].as_str().unwrap_or_default().to_string(),
        })
        .unwrap_or_default()
}

/// Runs `command` to its end, killed past `deadline`.
fn within(mut command: Command, deadline: Duration) -> ExitStatus {
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > deadline {
            child.kill().unwrap();
            panic!("the kit ran past {deadline:?}: {command:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What differs from the list: each test outside it that did not pass,
/// each listed one whose outcome is not the one listed, and each listed
/// one that did not run.
fn against_the_list(ran: &BTreeMap<String, Ran>) -> Vec<String> {
    let listed: BTreeMap<&str, Outcome> = EXCEPTIONS
        .iter()
        .map(|(id, outcome, _)| (*id, *outcome))
        .collect();
    let mut wrong = Vec::new();
    for (id, test) in ran {
        match (listed.get(id.as_str()), test.outcome.as_str()) {
            (None, "passed") => {}
            (Some(outcome), now) if outcome.as_str() == now => {}
            (None, now) => wrong.push(format!(
                "{id}: {now}, and it is not listed: fix the daemon, or list it with the reason ({})",
                test.said
            )),
            (Some(outcome), now) => wrong.push(format!(
                "{id}: listed as {}, but {now} ({}): take it off the list, or update it",
                outcome.as_str(),
                test.said
            )),
        }
    }
    for id in listed.keys() {
        if !ran.contains_key(*id) {
            wrong.push(format!("{id}: listed, but the kit did not run it"));
        }
    }
    wrong
}

/// The section of `docs/api.md` on the kit, its whitespace collapsed.
fn doc_section() -> String {
    let doc = std::fs::read_to_string(repo(DOC)).unwrap();
    let start = doc
        .find(SECTION)
        .unwrap_or_else(|| panic!("{DOC} has no section {SECTION:?}"));
    let body = &doc[start + SECTION.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The kit's test ids the section names (its backticked spans with `::`).
fn ids_named(section: &str) -> BTreeSet<String> {
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.contains(".py::"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_tck_must_level_passes_but_for_the_listed_tests() {
    let mock = mock_server("replies:\n  - content: Hello from the daemon.\n").await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let token = new_key(
        &site.path().join("keys.toml"),
        "tck",
        &["--scopes", "submit,read,operate"],
    );
    site.put_bundle(
        "echo",
        "name: echo\nversion: \"1\"\ndescription: Answers every message.\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    // The card's interface is where the client reached the daemon; the
    // kit counts 127.0.0.1 in a card as a leak, and allows localhost.
    let sut = daemon.url("/a2a").replace("127.0.0.1", "localhost");
    let ran = run_tck(&sut, &token, || daemon.log());
    assert!(
        ran.len() > 100,
        "the kit ran only {} tests: did its collection fail? {ran:#?}",
        ran.len()
    );
    let wrong = against_the_list(&ran);
    assert!(
        wrong.is_empty(),
        "{}\ndaemon log:\n{}",
        wrong.join("\n"),
        daemon.log()
    );

    // The page lists the same tests, and the figure.
    let section = doc_section();
    let listed: BTreeSet<String> = EXCEPTIONS.iter().map(|(id, ..)| id.to_string()).collect();
    assert_eq!(
        ids_named(&section),
        listed,
        "{DOC} ({SECTION}) must name exactly the listed tests"
    );
    let passed = ran.values().filter(|t| t.outcome == "passed").count();
    let figure = format!(
        "Of its {} MUST tests, {passed} pass and the {} below are listed",
        ran.len(),
        listed.len()
    );
    assert!(
        section.contains(&figure),
        "{DOC} ({SECTION}) must say: {figure}"
    );
    assert!(repo(TCK).join("VENDORED.md").exists(), "{TCK}: VENDORED.md");
}
