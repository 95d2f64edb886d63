//! The console is live to the word (issue 51 item 1): a model that sends
//! its first reply a word at a time shows on the job's page word by word,
//! before the reply has ended and before any event of the turn is stored
//! (the page once routed tokens only to an attempt drawn from a stored
//! event, so a first reply showed nothing until it was whole). In a real
//! browser (Chromium over WebDriver), against the mock model server
//! streaming one word every 250 ms. The timeline is never a step behind:
//! a finished tool call shows its result from its live frame while the
//! next turn runs (its stored `ToolResult` is written only with that
//! turn's reply). And its counters are honest (item 2): a job scheduled
//! ahead says when it starts, and every budget that can stop a job has a
//! meter.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
mod common;

use browser::Browser;
use common::daemon::{Site, client, submit_body, wait_terminal};
use common::mock_server;
use serde_json::json;
use std::time::{Duration, SystemTime};

/// Twenty words, one every 250 ms: five seconds of streaming.
const WORDS: &str = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty";

/// The daemon streams a model call only to a job somebody watches when the
/// call starts: with one worker, the job waits behind a job whose tool
/// blocks until the page watches it, then the blocker is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_reply_streams_onto_the_page_word_by_word() {
    let mock = mock_server(&format!(
        "replies:\n  - {{match: block, turn: 1, tool_calls: [{{id: b1, name: block, arguments: {{}}}}]}}\n  - match: count\n    content: \"{WORDS}\"\n    chunk_delay_ms: 250\n"
    ))
    .await;
    let site = Site::new(&mock.base_url(), "");
    let blocking = site.path().join("blocking");
    site.put_bundle(
        "talker",
        &format!(
            "name: talker\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: block\n    kind: process\n    effect: read_only\n    timeout: 600s\n    command: [python3, -c, \"import time; open('{}', 'w').close(); time.sleep(600)\"]\n",
            blocking.display()
        ),
    );
    let daemon = site.start_with_env(&[("STRUCTURED_AGENTS_QUEUE__WORKERS", "1")]);
    let http = client();
    let blocker = submit_body(
        &http,
        &daemon,
        json!({"bundle": "talker", "input": "block"}),
    )
    .await;
    common::daemon::eventually(
        Duration::from_secs(60),
        "the blocker's tool runs",
        || async { blocking.exists().then_some(()) },
    )
    .await;
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "talker", "input": "count"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_text("#stream-status", "live").await;
    // Counts the token frames as the page's stream reader gets them, and
    // notes how many had come when the reply first showed text.
    browser.eval_text(FRAME_WATCH).await;
    let (status, cancelled) = common::daemon::post_json(
        &http,
        &daemon,
        &format!("/v1/jobs/{}/cancel", blocker["id"].as_str().unwrap()),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    // The first text the page shows of the reply, kept as it first appears.
    browser
        .wait_until(
            "window.firstShown || (document.querySelector('.reply.streaming')?.textContent && (window.firstShown = document.querySelector('.reply.streaming').textContent))",
        )
        .await;
    let first = browser.eval_text("window.firstShown").await;
    let shown: Vec<&str> = first.split_whitespace().collect();
    let all: Vec<&str> = WORDS.split_whitespace().collect();
    assert!(
        !shown.is_empty() && shown.len() < all.len() && all.starts_with(&shown),
        "the page first showed {first:?}: not the reply's first words while it streamed"
    );
    // Drawn as the frames come, not gathered: the first text showed by the
    // second token frame (they come 250 ms apart), not after many.
    browser
        .wait_until("window.watch.shownAtFrame !== undefined")
        .await;
    let frames: u32 = browser
        .eval_text("String(window.watch.shownAtFrame)")
        .await
        .parse()
        .unwrap();
    assert!(
        (1..=2).contains(&frames),
        "the reply first showed after {frames} token frames: the page gathers them"
    );
    let after = browser
        .eval_text("String(Math.round(window.watch.shownAt - window.watch.firstFrameAt))")
        .await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    browser.wait_text("#answer", "twenty").await;
    eprintln!(
        "first shown: {} of {} words, at token frame {frames}, {after} ms after the first frame reached the page",
        shown.len(),
        all.len()
    );
    browser.close().await;
}

/// Counts the token frames the page's stream reader receives
/// (`window.watch.frames`, the time of the first in `firstFrameAt`) and
/// notes, when the streaming reply first holds text, how many had come
/// (`shownAtFrame`) and when (`shownAt`): the reader's `read` is wrapped,
/// so frames are counted as the page gets them, before it draws them.
const FRAME_WATCH: &str = r#"(() => {
  window.watch = { frames: 0 };
  const read = ReadableStreamDefaultReader.prototype.read;
  ReadableStreamDefaultReader.prototype.read = async function () {
    const got = await read.call(this);
    if (!got.done && typeof got.value === "string") {
      const frames = got.value.split("event: token").length - 1;
      if (frames && window.watch.firstFrameAt === undefined) window.watch.firstFrameAt = performance.now();
      window.watch.frames += frames;
    }
    return got;
  };
  new MutationObserver(() => {
    const reply = document.querySelector(".reply.streaming");
    if (reply && reply.textContent.trim() && window.watch.shownAt === undefined) {
      window.watch.shownAt = performance.now();
      window.watch.shownAtFrame = window.watch.frames;
    }
  }).observe(document.body, { subtree: true, childList: true, characterData: true });
  return "";
})()"#;

/// Whether the timeline ever drew the `fetch` call as still running while
/// turn 2 was on the page (`window.wrong`, what it showed), and what turn 2
/// had shown when the call's result first appeared (`window.shown`):
/// checked on every change of the page, so no state is missed between
/// two looks of the test.
const WATCH_TIMELINE: &str = r#"(() => {
  const turn2 = () => [...document.querySelectorAll('#timeline li.item.turn')].find((li) => li.querySelector('.turn-head b')?.textContent === 'Turn 2');
  const check = () => {
    const t2 = turn2();
    const call = document.querySelector('#timeline .call[data-tool=fetch]');
    if (t2 && call && call.classList.contains('running')) window.wrong = call.textContent;
    const result = call?.querySelector('pre.result');
    if (!window.shown && result) window.shown = { words: (t2?.querySelector('.reply')?.textContent || '').split(/\s+/).filter(Boolean).length, text: result.textContent, source: call.dataset.source };
  };
  new MutationObserver(check).observe(document.body, { childList: true, subtree: true, characterData: true });
  check();
  return true;
})()"#;

/// A finished tool call shows its result at once, while the next turn's
/// reply streams: its `ToolResult` event is stored only with that reply, 5 s
/// later (twenty words, one every 250 ms), and the page once drew the call
/// as "no result yet" all that time. The result first shows from the
/// call's live frame, and the stored event replaces it once written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_shows_its_result_while_the_next_turn_runs() {
    let mock = mock_server(&format!(
        "replies:\n  - {{turn: 1, tool_calls: [{{id: f1, name: fetch, arguments: {{n: 42}}}}]}}\n  - turn: 2\n    content: \"{WORDS}\"\n    chunk_delay_ms: 250\n"
    ))
    .await;
    let site = Site::new(&mock.base_url(), "");
    let go = site.path().join("go");
    site.put_bundle(
        "fetcher",
        &format!(
            "name: fetcher\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: fetch\n    kind: process\n    effect: read_only\n    timeout: 600s\n    command: [python3, -c, \"import os, time\\nwhile not os.path.exists('{}'): time.sleep(0.05)\\nprint(42)\"]\n",
            go.display()
        ),
    );
    let daemon = site.start();
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "fetcher", "input": "fetch"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_text("#stream-status", "live").await;
    browser.wait_text("#in-progress", "fetch").await;
    browser.wait_until(WATCH_TIMELINE).await;
    std::fs::write(&go, "").unwrap();

    browser.wait_until("window.shown").await;
    let words: usize = browser
        .eval_text("window.shown.words")
        .await
        .parse()
        .unwrap();
    let all = WORDS.split_whitespace().count();
    assert!(
        words < all,
        "the call's result showed only after turn 2's whole reply ({words} of {all} words): a step behind"
    );
    assert_eq!(browser.eval_text("window.shown.text").await.trim(), "42");
    assert_eq!(browser.eval_text("window.shown.source").await, "live");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    browser.wait_text("#answer", "twenty").await;
    // The stored event replaced the live drawing, with the same result.
    browser
        .wait_until("document.querySelector('#timeline .call[data-tool=fetch]')?.dataset.source === 'stored'")
        .await;
    assert_eq!(
        browser
            .text_of("#timeline .call[data-tool=fetch] pre.result")
            .await
            .trim(),
        "42"
    );
    let wrong = browser.eval_text("window.wrong").await;
    assert!(
        wrong.is_empty(),
        "the finished call read as still running while turn 2 ran: {wrong:?}"
    );
    eprintln!("result shown with {words} of {all} words of turn 2 on the page");
    browser.close().await;
}

/// A job scheduled ahead says when it starts, on its page and in the list
/// (it read "waiting 10 min" with its `run_at` three hours off, shown
/// nowhere), and every budget that can stop a job has a meter: a bundle's
/// `tool_calls` budget read "(no budget)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_job_says_when_it_starts_and_each_budget_has_a_meter() {
    let mock = mock_server(
        "replies:\n  - turn: 1\n    tool_calls: [{id: c1, name: echo, arguments: {}}]\n    usage: {prompt_tokens: 30, completion_tokens: 5, total_tokens: 35}\n  - turn: 2\n    content: done\n    usage: {prompt_tokens: 40, completion_tokens: 7, total_tokens: 47}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "metered",
        "name: metered\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\nlimits: {tool_calls: 3, model_calls: 5, wall_time: 10m, prompt_tokens: 1000, completion_tokens: 100, cost: 2}\ntools:\n  - name: echo\n    kind: process\n    effect: read_only\n    command: [python3, -c, \"print('{}')\"]\n",
    );
    let daemon = site.start();
    let http = client();
    let browser = Browser::start(1440, 900, false).await;

    let later = humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(3 * 3600));
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "metered", "input": "later", "run_at": later.to_string()}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_text("#scheduled", "scheduled for").await;
    browser.wait_text("#scheduled-in", "(in 2 h 59 min)").await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.wait_text("main", "scheduled in 2 h 59 min").await;

    let done = common::daemon::submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "metered", "input": "now"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let done_id = done["id"].as_str().unwrap();
    browser
        .goto(&daemon.url(&format!("/ui/jobs/{done_id}")))
        .await;
    // Each meter: what was spent (in bold), then "of" its limit.
    for (meter, spent, limit) in [
        ("tool-calls", "1", "of 3"),
        ("model-calls", "2", "of 5"),
        ("wall-time", "", "of 10 min 0 s"),
        ("prompt-tokens", "70", "of 1000"),
        ("completion-tokens", "12", "of 100"),
        ("tokens", "82", "(no budget)"),
        ("cost", "$0.0000", "of $2.0000"),
    ] {
        browser.wait_text(&format!("#{meter}"), limit).await;
        let shown = browser.text_of(&format!("#{meter} b")).await;
        assert!(shown.starts_with(spent), "{meter}: spent {shown:?}");
    }
    browser.close().await;
}

/// A job whose daemon was killed (`kill -9`) reads as what it is, not as
/// running: once its worker missed two heartbeats the header says for how
/// long and when the lease expires (it read "running · ● live" until the
/// lease expired), and then the page shows the resume: the daemon started
/// again on the same address takes the job when its lease expires and
/// finishes it. The first model call answers only after 120 s, so the kill
/// comes mid-call however slowly the browser starts (it answered after 6 s,
/// and a browser slower than that under load saw the job already done);
/// the resumed call answers at once.
/// The lease is the fixture's 30 s (a heartbeat every 10 s), so
/// the state shows from 23 s after the last heartbeat (two heartbeats and
/// one of the page's 3 s polls) until 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_job_says_no_heartbeat_then_shows_its_resume() {
    let mock = mock_server(&format!(
        "mode: sequential\nreplies:\n  - content: \"{WORDS}\"\n    delay_ms: 120000\n  - content: \"{WORDS}\"\n"
    ))
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "talker",
        "name: talker\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    // The daemon comes back where the page points.
    let address = daemon.base.trim_start_matches("http://").to_string();
    let config = std::fs::read_to_string(site.path().join("config.toml")).unwrap();
    std::fs::write(
        site.path().join("config.toml"),
        config.replace("127.0.0.1:0", &address),
    )
    .unwrap();
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "talker", "input": "count"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    // The first model call is slow: the job runs, inside its model call.
    browser.wait_for("#run-header[data-state=running]").await;
    daemon.kill9();
    let daemon = site.start();
    assert_eq!(daemon.base, format!("http://{address}"));

    let said = browser.wait_text("#no-heartbeat", "no heartbeat for").await;
    assert!(said.contains("lease expires in"), "{said}");
    assert!(
        browser.text_of("#run-header").await.contains("running"),
        "the job still runs as far as the store knows"
    );
    // The resume: a new attempt, after the crash, and no silence any more.
    browser.wait_text("#run-header", "1 after a crash").await;
    browser
        .wait_until("document.querySelector('#no-heartbeat')?.hidden !== false")
        .await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["crash_resumes"], 1, "{done}");
    browser.wait_text("#answer", "twenty").await;
    browser.close().await;
}

/// A call parked inside a nested bundle (an agent tool's run) names the
/// rule that asked, the bundle whose rule it is and the path to it, on the
/// job's page and in the approvals inbox: both said "the tool's approval
/// rule", looking the tool up in the outer bundle, which has no such tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_park_names_its_rule_its_bundle_and_the_path_to_it() {
    let mock = mock_server(
        "replies:\n  - {match: big child, turn: 1, tool_calls: [{id: w1, name: wire_money, arguments: {amount: 500, to: alice}}]}\n  - {match: big child, turn: 2, content: wired}\n  - {match: nested task, turn: 1, tool_calls: [{id: a1, name: banker, arguments: {input: big child}}]}\n  - {match: nested task, turn: 2, content: parent done}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "bank",
        "name: bank\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - name: wire_money\n    kind: process\n    effect: read_only\n    parameters: {type: object, properties: {amount: {type: integer}, to: {type: string}}, required: [amount, to]}\n    approval: {when: \"args.amount > 100\"}\n    command: [python3, -c, \"print('{}')\"]\n",
    );
    site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: banker, kind: agent, bundle: bank}\n",
    );
    let daemon = site.start();
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "parent", "input": "nested task"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let parked = common::daemon::wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "awaiting_approval", "{parked}");
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser
        .wait_text(
            "#approvals .approval-path",
            "parent → ƒ banker → bank → ƒ wire_money",
        )
        .await;
    let rule = browser
        .wait_text("#approvals .approval-rule", "in bundle bank")
        .await;
    assert!(
        rule.contains("approval:") && rule.contains("args.amount > 100"),
        "the rule as the nested bundle says it: {rule}"
    );
    // The park itself records the bundle and the rule that asked, so the
    // inbox (which reads no run's events) names them too.
    let call = &parked["pending_call"];
    assert_eq!(call["bundle"], "bank", "{call}");
    assert!(
        call["rule"]
            .as_str()
            .is_some_and(|r| r.contains("args.amount > 100")),
        "{call}"
    );
    browser.goto(&daemon.url("/ui/approvals")).await;
    let item = format!(".inbox-item[data-job='{id}']");
    let rule = browser
        .wait_text(&format!("{item} .approval-rule"), "in bundle bank")
        .await;
    assert!(rule.contains("args.amount > 100"), "{rule}");
    browser
        .wait_text(
            &format!("{item} .approval-path"),
            "parent → via the agent call at turn 1, call 1 → bank → ƒ wire_money",
        )
        .await;
    browser.close().await;
}

/// Times the daemon wrote are read against the daemon's clock (the `Date`
/// of its answers), never the browser's: with the browser's clock ten
/// minutes ahead, a healthy running job read as "no heartbeat for 600 s"
/// at the first tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_clock_ahead_does_not_make_a_healthy_job_silent() {
    let mock = mock_server(&format!(
        "replies:\n  - content: \"{WORDS}\"\n    delay_ms: 6000\n"
    ))
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "talker",
        "name: talker\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.wait_for("#jobs").await;
    // From here the page's clock runs ten minutes ahead (the app stays
    // loaded: the job's page is reached without a reload), and a watcher
    // notes any moment the silence banner shows.
    browser
        .wait_until(
            "(() => { const real = Date.now; Date.now = () => real() + 600000; \
             window.sawSilence = false; \
             new MutationObserver(() => { const q = document.querySelector('#no-heartbeat'); \
               if (q && !q.hidden) window.sawSilence = true; }) \
               .observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true}); \
             return true; })()",
        )
        .await;
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "talker", "input": "count"}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    browser
        .wait_until(&format!(
            "(() => {{ history.pushState(null, '', '/ui/jobs/{id}'); \
             window.dispatchEvent(new PopStateEvent('popstate')); return true; }})()"
        ))
        .await;
    browser.wait_for("#run-header[data-state=running]").await;
    browser.wait_text("#answer", "twenty").await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        browser.eval_text("window.sawSilence").await,
        "false",
        "a healthy job read as silent with the browser's clock ahead"
    );
    browser.close().await;
}

/// A running job cancelled from its page (issue 51 item 2): the page says
/// the cancel is taken at the next step, then — once the job ended — that
/// it stopped, not that it will; the job reads "Cancelled" with no red
/// Error card; and the tool its cancel cut short is no tool error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_running_job_reads_cancelled_not_failed() {
    let mock = mock_server(
        "replies:\n  - {turn: 1, tool_calls: [{id: s1, name: sleepy, arguments: {}}]}\n  - {turn: 2, content: never}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "sleeper",
        "name: sleeper\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - name: sleepy\n    kind: process\n    effect: read_only\n    timeout: 600s\n    command: [python3, -c, \"import time; time.sleep(300)\"]\n",
    );
    let daemon = site.start();
    let http = client();
    let job = submit_body(&http, &daemon, json!({"bundle": "sleeper", "input": "nap"})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_text("#in-progress", "sleepy").await;
    browser.click("#cancel-job").await;
    browser.wait_for("dialog[open]").await;
    browser.confirm().await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    browser
        .wait_text("#outcome", "The job stopped as asked: it is cancelled")
        .await;
    browser
        .wait_text("#answer .card.ended-card", "Cancelled")
        .await;
    let outcome = browser.text_of("#outcome").await;
    assert!(!outcome.contains("next step"), "{outcome}");
    assert_eq!(
        browser
            .eval_text("String(document.querySelectorAll('#answer .card.failure').length)")
            .await,
        "0",
        "a cancelled job drew the red Error card"
    );
    assert_eq!(done["tool_errors"], 0, "{done}");
    browser.wait_text("#tool-errors", "0").await;
    browser.close().await;
}
