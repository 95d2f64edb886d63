//! One authorization policy (`access::policy`, docs/security.md): what a
//! job reaches indirectly is authorized as the key that owns it, and the
//! operations the policy now decides for every feature (migrate-jobs, A2A
//! push configs, listings) stay inside a key's own objects and bundles.
//! Driven through the real binary with API keys made by `keys new`.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client_as, new_key, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

async fn post(http: &reqwest::Client, daemon: &Daemon, path: &str, body: Value) -> (u16, Value) {
    let response = http
        .post(daemon.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A site whose API keys are in its `keys.toml` (made with `new_key`),
/// its models at `model_url`: the site and the keys file.
fn keyed_site(model_url: &str) -> (Site, std::path::PathBuf) {
    let site = Site::new(model_url, "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    (site, file)
}

/// Submits a job of `bundle` as the client's key and waits for its end.
async fn run_job(http: &reqwest::Client, daemon: &Daemon, bundle: &str, input: &str) -> Value {
    let (status, job) = post(
        http,
        daemon,
        "/v1/jobs",
        json!({"bundle": bundle, "input": input}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    wait_terminal(http, daemon, id, Duration::from_secs(60)).await
}

/// The names of the tools the model was offered in request `n`.
fn offered(requests: &[Value], n: usize) -> Vec<String> {
    requests[n]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// An agent bundle answering from the model server at `model_url`.
fn agent_bundle(name: &str, model_url: &str, extra: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\ndescription: The {name} agent.\nmodel: {{endpoint: \"{model_url}\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{extra}"
    )
}

/// The High finding of issue 46: key `alice` (bundles `pub-*, router`)
/// asked the router, whose directory reach called bundle `secret`. Now the
/// router's directory holds only what alice may use, a nested `agent` tool
/// that names `secret` is a tool error naming the rule, and `secret`'s
/// model never hears of alice's jobs; a key that may use `secret` still
/// reaches it both ways.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_reaches_only_the_bundles_of_the_key_that_owns_it() {
    // Every job: one call of the tool named in the input's first word,
    // then an answer.
    let script = r#"
replies:
  - {turn: 1, match: "secret", tool_calls: [{id: c1, name: secret, arguments: {input: "the vault code"}}]}
  - {turn: 1, match: "nest", tool_calls: [{id: c1, name: ask_secret, arguments: {input: "the vault code"}}]}
  - {turn: 2, content: routed}
"#;
    let router_model = mock_server(script).await;
    let secret_model = mock_server("replies:\n  - content: \"vault code 1234\"\n").await;
    let public_model = mock_server("replies:\n  - content: public\n").await;
    let site = Site::new(
        &router_model.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\n",
    );
    let file = site.path().join("keys.toml");
    let alice = new_key(
        &file,
        "alice",
        &[
            "--scopes",
            "submit,read",
            "--bundles",
            "pub-*,router,group-chat",
        ],
    );
    let admin = new_key(&file, "admin", &["--scopes", "admin"]);
    site.put_bundle(
        "router",
        "name: router\nversion: \"1\"\ndescription: Routes.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    site.put_bundle(
        "secret",
        &agent_bundle("secret", &secret_model.base_url(), ""),
    );
    site.put_bundle(
        "pub-echo",
        &agent_bundle("pub-echo", &public_model.base_url(), ""),
    );
    site.put_bundle(
        "pub-nest",
        &agent_bundle(
            "pub-nest",
            &router_model.base_url(),
            "tools:\n  - {name: ask_secret, kind: agent, bundle: secret, description: Asks the secret agent.}\n",
        ),
    );
    site.put_bundle(
        "group-chat",
        "name: group-chat\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You moderate.\", user: \"{{ input }}\"}\ngroup_chat: {max_rounds: 1, stop_word: DONE}\n",
    );
    let daemon = site.start();
    let (alice_http, admin_http) = (client_as(&alice), client_as(&admin));

    // A group chat of alice's with `secret` among its members is refused
    // as a bundle she may not use is, naming it; one of her own bundles
    // runs, and `secret`'s model never hears of either.
    let chat = |agents: Value| json!({"query": "talk", "agent_ids": agents, "max_iterations": 1});
    let (status, refused) = post(
        &alice_http,
        &daemon,
        "/api/group-chat",
        chat(json!(["pub-echo", "secret"])),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused.to_string().contains("secret"), "{refused}");
    let (status, answer) = post(
        &alice_http,
        &daemon,
        "/api/group-chat",
        chat(json!(["pub-echo"])),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.to_string().contains("public"), "{answer}");
    assert_eq!(secret_model.requests().len(), 0);

    // The router's directory, as alice's job sees it: no `secret`.
    let (status, answer) = post(
        &alice_http,
        &daemon,
        "/api/query",
        json!({"query": "secret please"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}\n{}", daemon.log());
    let requests = router_model.requests();
    let tools = offered(&requests, 0);
    assert!(
        tools.contains(&"pub-echo".to_string()) && !tools.contains(&"secret".to_string()),
        "alice's router is offered only her bundles: {tools:?}"
    );
    assert_eq!(
        secret_model.requests().len(),
        0,
        "secret's model never runs for alice"
    );

    // A nested `agent` tool that names `secret` in alice's job: a tool
    // error naming the rule, which the model reads.
    let done = run_job(&alice_http, &daemon, "pub-nest", "nest it").await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let requests = router_model.requests();
    let told = requests
        .iter()
        .filter(|r| r["messages"].to_string().contains("nest it"))
        .map(|r| r["messages"].to_string())
        .find(|m| m.contains("reach_bundle"))
        .unwrap_or_else(|| panic!("the model was not told why: {requests:?}"));
    assert!(
        told.contains("secret") && told.contains("alice"),
        "the tool error names the bundle, the key and the rule: {told}"
    );
    assert_eq!(
        secret_model.requests().len(),
        0,
        "{:?}",
        secret_model.requests()
    );

    // The admin key may use `secret`: both reaches run it.
    let before = router_model.requests().len();
    let (status, answer) = post(
        &admin_http,
        &daemon,
        "/api/query",
        json!({"query": "secret please"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let tools = offered(&router_model.requests(), before);
    assert!(tools.contains(&"secret".to_string()), "{tools:?}");
    assert_eq!(secret_model.requests().len(), 1);
    let done = run_job(&admin_http, &daemon, "pub-nest", "nest it again").await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(secret_model.requests().len(), 2);
}

/// The policy's answers for another key's objects: `GET /v1/jobs/counts`
/// and listings show only the key's own jobs of its own bundles, and
/// another key's job answers exactly as an unknown id does.
#[tokio::test(flavor = "multi_thread")]
async fn another_keys_jobs_and_bundles_do_not_exist_for_a_key() {
    let model = mock_server("replies:\n  - content: done\n").await;
    let (site, file) = keyed_site(&model.base_url());
    let alice = new_key(
        &file,
        "alice",
        &["--scopes", "submit,read", "--bundles", "pub-*"],
    );
    let bob = new_key(&file, "bob", &["--scopes", "submit,read"]);
    let auditor = new_key(
        &file,
        "auditor",
        &["--scopes", "read_all", "--bundles", "pub-*"],
    );
    for name in ["pub-a", "secret"] {
        site.put_bundle(name, &agent_bundle(name, &model.base_url(), ""));
    }
    let daemon = site.start();
    let (alice_http, bob_http, auditor_http) =
        (client_as(&alice), client_as(&bob), client_as(&auditor));
    let mut bobs = Vec::new();
    for bundle in ["pub-a", "secret"] {
        let (status, job) = post(
            &bob_http,
            &daemon,
            "/v1/jobs",
            json!({"bundle": bundle, "input": "hi"}),
        )
        .await;
        assert_eq!(status, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        wait_terminal(&bob_http, &daemon, &id, Duration::from_secs(30)).await;
        bobs.push(id);
    }
    let get = |http: &reqwest::Client, path: String| {
        let request = http.get(daemon.url(&path));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let unknown = get(&alice_http, "/v1/jobs/01J0000000000000000000000".into()).await;
    for id in &bobs {
        let answer = get(&alice_http, format!("/v1/jobs/{id}")).await;
        assert_eq!(answer.0, unknown.0, "{answer:?} vs {unknown:?}");
        assert_eq!(answer.1["error"]["code"], unknown.1["error"]["code"]);
    }
    // read_all reads bob's job of a bundle it may use, never the other.
    assert_eq!(
        get(&auditor_http, format!("/v1/jobs/{}", bobs[0])).await.0,
        200
    );
    assert_eq!(
        get(&auditor_http, format!("/v1/jobs/{}", bobs[1])).await.0,
        unknown.0
    );
    let (_, listed) = get(&auditor_http, "/v1/jobs".into()).await;
    let bundles: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["bundle"].as_str().unwrap())
        .collect();
    assert_eq!(bundles, ["pub-a"], "{listed}");
    let (status, counts) = get(&auditor_http, "/v1/jobs/counts".into()).await;
    assert_eq!(status, 200, "{counts}");
    assert!(
        !counts.to_string().contains("secret"),
        "counts name no bundle outside the key's globs: {counts}"
    );
    assert_eq!(
        counts["total"], 1,
        "read_all counts bob's job of pub-a: {counts}"
    );
    // A key without read_all counts only its own jobs: none of bob's.
    let (status, counts) = get(&alice_http, "/v1/jobs/counts".into()).await;
    assert_eq!(status, 200, "{counts}");
    assert_eq!(counts["total"], 0, "{counts}");
    assert_eq!(counts["bundles"], json!({}), "{counts}");
    let (status, counts) = get(&bob_http, "/v1/jobs/counts".into()).await;
    assert_eq!(status, 200, "{counts}");
    assert_eq!(counts["total"], 2, "{counts}");
}

/// `migrate-jobs` moves a key's own jobs: a key with `operate` neither
/// lists nor moves another key's (it did: 26 of 32 moved for real); only
/// `operate_all` moves every key's.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_jobs_moves_only_the_callers_own_jobs_unless_it_operates_all() {
    let script = r#"
replies:
  - {turn: 1, tool_calls: [{id: p1, name: pay, arguments: {amount: 5}}]}
  - {turn: 2, content: paid}
"#;
    let model = mock_server(script).await;
    let (site, file) = keyed_site(&model.base_url());
    let alice = new_key(&file, "alice", &["--scopes", "submit,read,operate"]);
    let bob = new_key(&file, "bob", &["--scopes", "submit,read,operate"]);
    let admin = new_key(&file, "admin", &["--scopes", "admin"]);
    let bank = |version: &str| {
        format!(
            "name: bank\nversion: \"{version}\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: pay\n    kind: process\n    effect: unsafe\n    approval: always\n    parameters: {{type: object, properties: {{amount: {{type: integer}}}}, required: [amount]}}\n    command: [python3, -c, \"print('{{}}')\"]\n"
        )
    };
    site.put_bundle("bank", &bank("1"));
    let daemon = site.start();
    let (alice_http, bob_http, admin_http) =
        (client_as(&alice), client_as(&bob), client_as(&admin));
    let mut parked = Vec::new();
    for http in [&alice_http, &bob_http] {
        let (status, job) = post(
            http,
            &daemon,
            "/v1/jobs",
            json!({"bundle": "bank", "input": "pay"}),
        )
        .await;
        assert_eq!(status, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        common::daemon::eventually(Duration::from_secs(30), "the job parks", || {
            let request = http.get(daemon.url(&format!("/v1/jobs/{id}")));
            async move {
                let job: Value = request.send().await.ok()?.json().await.ok()?;
                (job["state"] == "awaiting_approval").then_some(())
            }
        })
        .await;
        parked.push(id);
    }
    site.put_bundle("bank", &bank("2"));
    let (status, outcome) = post(&admin_http, &daemon, "/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{outcome}");

    let ids = |plan: &Value| -> Vec<String> {
        plan["moves"]
            .as_array()
            .unwrap()
            .iter()
            .chain(plan["refused"].as_array().unwrap())
            .map(|m| m["job_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, dry) = post(
        &admin_http,
        &daemon,
        "/v1/bundles/bank/migrate-jobs",
        json!({"dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    let mut all = ids(&dry);
    all.sort();
    let mut both = parked.clone();
    both.sort();
    assert_eq!(all, both, "operate_all sees every key's jobs: {dry}");

    let (status, plan) = post(
        &alice_http,
        &daemon,
        "/v1/bundles/bank/migrate-jobs",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        ids(&plan),
        [parked[0].clone()],
        "alice moves only her own job: {plan}"
    );
    let version = |http: &reqwest::Client, id: &str| {
        let request = http.get(daemon.url(&format!("/v1/jobs/{id}")));
        async move {
            let job: Value = request.send().await.unwrap().json().await.unwrap();
            job["bundle_version"].clone()
        }
    };
    assert_eq!(version(&alice_http, &parked[0]).await, "2");
    assert_eq!(
        version(&bob_http, &parked[1]).await,
        "1",
        "bob's job stays where it was"
    );
}

/// A revoked key hears nothing more: the reload that revokes it ends its
/// open event stream (it went on for 5 KB), while the job it followed runs
/// on and another key's stream keeps flowing.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_revokes_a_key_ends_its_open_streams() {
    // The job's model call takes far longer than the test waits.
    let model = mock_server("replies:\n  - {content: slow, delay_ms: 120000}\n").await;
    let (site, file) = keyed_site(&model.base_url());
    let leaving = new_key(&file, "leaving", &["--scopes", "submit,read"]);
    let admin = new_key(&file, "admin", &["--scopes", "admin"]);
    site.put_bundle("slow", &agent_bundle("slow", &model.base_url(), ""));
    let daemon = site.start();
    let (leaving_http, admin_http) = (client_as(&leaving), client_as(&admin));
    let (status, job) = post(
        &leaving_http,
        &daemon,
        "/v1/jobs",
        json!({"bundle": "slow", "input": "take your time"}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let open = |http: &reqwest::Client| {
        let request = http
            .get(daemon.url(&format!("/v1/jobs/{id}/events")))
            .timeout(Duration::from_secs(600));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response
        }
    };
    let leaving_stream = open(&leaving_http).await;
    let admin_stream = open(&admin_http).await;

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["keys", "revoke", "leaving", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, outcome) = post(&admin_http, &daemon, "/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{outcome}");

    // The revoked key's stream ends (its body is read to its end); the
    // guard is only against a hang, far below the job's two minutes.
    let ended = tokio::time::timeout(Duration::from_secs(60), leaving_stream.bytes()).await;
    assert!(
        matches!(ended, Ok(Ok(_)) | Ok(Err(_))),
        "the revoked key's stream is still open\n{}",
        daemon.log()
    );
    let job_now: Value = admin_http
        .get(daemon.url(&format!("/v1/jobs/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        job_now["state"], "running",
        "the job itself runs on: {job_now}"
    );
    // The other key's stream is still open: a chunk (a heartbeat) arrives.
    let mut admin_stream = admin_stream;
    let chunk = tokio::time::timeout(Duration::from_secs(60), admin_stream.chunk()).await;
    assert!(
        matches!(chunk, Ok(Ok(Some(_)))),
        "the admin's stream ended with the other key's: {chunk:?}"
    );
    assert!(
        daemon.log().contains("the key was revoked"),
        "{}",
        daemon.log()
    );
}

/// A workflow stage that runs another bundle is a reach like a nested
/// agent: alice's workflow job may not run bundle `secret` in a stage (the
/// job fails naming the rule, and `secret`'s model never hears of it); the
/// admin's job of the same workflow runs it.
#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_stage_reaches_only_the_bundles_of_the_key_that_owns_the_job() {
    let secret_model = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(
        &secret_model.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n",
    );
    let file = site.path().join("keys.toml");
    let alice = new_key(
        &file,
        "alice",
        &["--scopes", "submit,read", "--bundles", "pub-*"],
    );
    let admin = new_key(&file, "admin", &["--scopes", "admin"]);
    site.put_bundle(
        "secret",
        &agent_bundle("secret", &secret_model.base_url(), ""),
    );
    site.put_bundle(
        "pub-flow",
        &agent_bundle(
            "pub-flow",
            &secret_model.base_url(),
            "workflow:\n  start: ask\n  stages:\n    ask:\n      kind: agent\n      bundle: secret\n      prompt: \"{{ input }}\"\n      result: {regex: '^(?P<event>done)$', events: [done], otherwise: not_done}\n  transitions:\n    ask: {done: finish, not_done: fatal}\n",
        ),
    );
    let daemon = site.start();
    let (alice_http, admin_http) = (client_as(&alice), client_as(&admin));

    let done = run_job(&alice_http, &daemon, "pub-flow", "go").await;
    assert_ne!(done["state"], "succeeded", "{done}");
    let told = done.to_string();
    assert!(
        told.contains("reach_bundle") && told.contains("secret"),
        "the job says which rule stopped the stage: {done}\n{}",
        daemon.log()
    );
    assert_eq!(
        secret_model.requests().len(),
        0,
        "secret never ran for alice"
    );

    let done = run_job(&admin_http, &daemon, "pub-flow", "go").await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(secret_model.requests().len(), 1);
}

/// A key whose globs a reload narrows reaches the bundle it lost through
/// nothing it made before: its old job of that bundle no longer exists for
/// it (no rerun, no fork), and its schedule of that bundle fires as the
/// key, so each fire is refused and no job starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_narrowed_key_reaches_nothing_through_what_it_made_before() {
    let model = mock_server("replies:\n  - content: done\n").await;
    let (site, file) = keyed_site(&model.base_url());
    let alice = new_key(
        &file,
        "alice",
        &["--scopes", "submit,read,operate", "--bundles", "pub-*,old"],
    );
    let admin = new_key(&file, "admin", &["--scopes", "admin"]);
    site.put_bundle("old", &agent_bundle("old", &model.base_url(), ""));
    let daemon = site.start();
    let (http, admin_http) = (client_as(&alice), client_as(&admin));
    let before = run_job(&http, &daemon, "old", "before").await;
    assert_eq!(before["state"], "succeeded", "{before}");
    let id = before["id"].as_str().unwrap();
    let (status, made) = post(
        &http,
        &daemon,
        "/v1/schedules",
        json!({"id": "tick", "bundle": "old", "cron": "* * * * * *", "input": "tick"}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let text = std::fs::read_to_string(&file).unwrap();
    let narrowed = text.replace("\"pub-*\",\n    \"old\",\n", "\"pub-*\",\n");
    let narrowed = narrowed.replace("\"pub-*\", \"old\"", "\"pub-*\"");
    assert_ne!(narrowed, text, "the keys file names alice's globs: {text}");
    std::fs::write(&file, narrowed).unwrap();
    let (status, reloaded) = post(&admin_http, &daemon, "/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{reloaded}");
    let heard = model.requests().len();

    // Her job of `old` no longer exists for her (a job is seen through the
    // key's globs), so neither can be made again from it.
    let (status, rerun) = post(&http, &daemon, &format!("/v1/jobs/{id}/rerun"), json!({})).await;
    assert_eq!(status, 404, "{rerun}");
    let (status, fork) = post(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/fork"),
        json!({"at_turn": 1}),
    )
    .await;
    assert_eq!(status, 404, "{fork}");
    common::daemon::eventually(Duration::from_secs(30), "a fire is refused", || async {
        let response = admin_http
            .get(daemon.url("/v1/schedules/alice:tick"))
            .send()
            .await
            .ok()?;
        let schedule: Value = response.json().await.ok()?;
        (schedule["last_outcome"] == "refused").then_some(())
    })
    .await;
    assert_eq!(
        model.requests().len(),
        heard,
        "no job of `old` ran for alice"
    );
}

/// A key that reads every key's tasks (`read_all`) once read another
/// key's A2A push token and credentials and replaced its config, so the
/// pushes went to it. Now it sees where the pushes go but not the secrets
/// (`[redacted]`), and changing or deleting the config is refused
/// (`operate_all` is needed); the task's own key still sees its secrets.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_of_every_key_neither_sees_nor_changes_another_keys_push_config() {
    let model = mock_server("replies:\n  - content: done\n    delay_ms: 60000\n").await;
    let site = Site::new(
        &model.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[egress]\nallow = [\"http://127.0.0.1:*\"]\n",
    );
    let file = site.path().join("keys.toml");
    let bob = new_key(&file, "bob", &["--scopes", "submit,read,operate"]);
    let auditor = new_key(&file, "auditor", &["--scopes", "read,read_all"]);
    site.put_bundle("hello", &agent_bundle("hello", &model.base_url(), ""));
    let daemon = site.start();
    let (bob_http, auditor_http) = (client_as(&bob), client_as(&auditor));
    let rpc = |http: &reqwest::Client, method: &str, params: Value| {
        let request = http
            .post(daemon.url("/a2a/hello"))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let sent = rpc(
        &bob_http,
        "SendMessage",
        json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
               "configuration": {"returnImmediately": true,
                                 "taskPushNotificationConfig": {"id": "c1", "url": "http://127.0.0.1:9/bob",
                                     "token": "bob-secret",
                                     "authentication": {"scheme": "Bearer", "credentials": "bob-credentials"}}}}),
    )
    .await;
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    let listed = rpc(
        &auditor_http,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    let seen = listed.to_string();
    assert!(seen.contains("http://127.0.0.1:9/bob"), "{listed}");
    assert!(
        !seen.contains("bob-secret") && !seen.contains("bob-credentials"),
        "{listed}"
    );
    assert!(seen.contains("[redacted]"), "{listed}");
    let got = rpc(
        &auditor_http,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "c1"}),
    )
    .await;
    assert!(!got.to_string().contains("bob-secret"), "{got}");
    // It may read the task, so it is told it may not change it (not that
    // the task is unknown).
    for (method, params) in [
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "id": "c1", "url": "http://127.0.0.1:9/mine"}),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task, "id": "c1"}),
        ),
    ] {
        let refused = rpc(&auditor_http, method, params).await;
        assert_eq!(refused["error"]["code"], "forbidden", "{method}: {refused}");
        assert!(
            refused.to_string().contains("operate_all"),
            "{method}: {refused}"
        );
    }
    let own = rpc(
        &bob_http,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    let own = own.to_string();
    assert!(
        own.contains("bob-secret") && own.contains("http://127.0.0.1:9/bob"),
        "the config is bob's as he set it: {own}"
    );
}
