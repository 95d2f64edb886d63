//! The authorization policy's case table, through the HTTP API of the real
//! binary: every action on a job, a conversation and a schedule × {the
//! key's own object, another key's, an unknown id} × a key of each scope.
//! What each case must answer follows from the policy's three rules
//! (docs/security.md): without the action's scope a 403 naming it; an
//! unknown id, or another key's object without the action's "all" scope, the
//! very 404 an unknown id gets — except a 403 for a key that may read the
//! object but not change it; otherwise the action is let through (whatever
//! the object's state then answers: 2xx, 409, 422).

mod common;

use std::collections::BTreeSet;

use common::daemon::{Site, client_as, new_key};
use common::mock_server;
use serde_json::{Value, json};

/// How the policy answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 403: the key lacks the action's scope.
    Scope,
    /// 403: another key's object the key may read, not change.
    Foreign,
    /// 404, the same as an unknown id's.
    Hidden,
    /// Past the policy: the object's own answer.
    Allowed,
}

/// One key of the table: its name and scopes (as `keys new` takes them).
struct Key {
    name: &'static str,
    scopes: &'static str,
}

const KEYS: [Key; 8] = [
    Key {
        name: "owner",
        scopes: "submit,read,operate,approve",
    },
    Key {
        name: "submitter",
        scopes: "submit",
    },
    Key {
        name: "reader",
        scopes: "read",
    },
    Key {
        name: "operator",
        scopes: "read,operate",
    },
    Key {
        name: "approver",
        scopes: "read,approve",
    },
    Key {
        name: "auditor",
        scopes: "read_all",
    },
    Key {
        name: "superoperator",
        scopes: "read,operate_all",
    },
    Key {
        name: "admin",
        scopes: "admin",
    },
];

/// What an action needs: its scope, the scope that extends it to other
/// keys' objects, and whether it only reads.
struct Needs {
    scope: &'static str,
    others: &'static str,
    reads: bool,
}

/// Whether scopes `has` include `scope` (admin all; read_all ⊇ read;
/// operate_all ⊇ operate).
fn holds(has: &str, scope: &str) -> bool {
    let has: BTreeSet<&str> = has.split(',').collect();
    has.contains("admin")
        || has.contains(scope)
        || (scope == "read" && has.contains("read_all"))
        || (scope == "operate" && has.contains("operate_all"))
}

fn expected(key: &Key, needs: &Needs, whose: Whose) -> Answer {
    if !holds(key.scopes, needs.scope) {
        return Answer::Scope;
    }
    match whose {
        Whose::Unknown => Answer::Hidden,
        Whose::Own => Answer::Allowed,
        Whose::Other if holds(key.scopes, needs.others) => Answer::Allowed,
        Whose::Other if !needs.reads && holds(key.scopes, "read_all") => Answer::Foreign,
        Whose::Other => Answer::Hidden,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    Own,
    Other,
    Unknown,
}

/// One route of an action: method, path with `{id}` for the object.
struct Case {
    action: &'static str,
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
    needs: Needs,
}

fn read(action: &'static str, path: &'static str) -> Case {
    Case {
        action,
        method: "GET",
        path,
        body: None,
        needs: Needs {
            scope: "read",
            others: "read_all",
            reads: true,
        },
    }
}

fn change(
    action: &'static str,
    method: &'static str,
    path: &'static str,
    scope: &'static str,
    body: Value,
) -> Case {
    Case {
        action,
        method,
        path,
        body: Some(body),
        needs: Needs {
            scope,
            others: "operate_all",
            reads: false,
        },
    }
}

/// Sends one case; how the policy answered it, and the body.
async fn ask(http: &reqwest::Client, base: &str, case: &Case, id: &str) -> (Answer, u16, Value) {
    let url = format!("{base}{}", case.path.replace("{id}", id));
    let request = match case.method {
        "GET" => http.get(&url),
        "DELETE" => http.delete(&url),
        _ => http.post(&url),
    };
    let request = match &case.body {
        Some(body) => request.json(body),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let text = body.to_string();
    let answer = match status {
        403 if text.contains("scope this request needs") => Answer::Scope,
        403 => Answer::Foreign,
        404 => Answer::Hidden,
        _ => Answer::Allowed,
    };
    (answer, status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_answers_by_the_policy_for_own_other_and_unknown_objects_and_every_scope() {
    let model = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&model.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let tokens: Vec<String> = KEYS
        .iter()
        .map(|k| new_key(&file, k.name, &["--scopes", k.scopes]))
        .collect();
    site.put_bundle(
        "hello",
        "name: hello\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let base = daemon.url("");
    let base = base.trim_end_matches('/').to_string();
    let clients: Vec<reqwest::Client> = tokens.iter().map(|t| client_as(t)).collect();

    // Each key with `submit` owns a job (waiting far ahead, so it stays),
    // in a conversation of its own, and a schedule.
    let mut jobs = Vec::new();
    for (key, http) in KEYS.iter().zip(&clients) {
        if !holds(key.scopes, "submit") {
            jobs.push(None);
            continue;
        }
        let response = http
            .post(format!("{base}/v1/jobs"))
            .json(
                &json!({"bundle": "hello", "input": "hi", "run_at": "2099-01-01T00:00:00Z",
                          "conversation_id": format!("conv-{}", key.name)}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        let job: Value = response.json().await.unwrap();
        let response = http
            .post(format!("{base}/v1/schedules"))
            .json(
                &json!({"id": format!("sched-{}", key.name), "bundle": "hello",
                          "cron": "0 0 1 1 *", "input": "yearly"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        jobs.push(Some(job["id"].as_str().unwrap().to_string()));
    }
    let owner = 0;
    let other_job = jobs[owner].clone().unwrap();

    let job_cases = [
        read("read_job", "/v1/jobs/{id}"),
        read("read_job", "/v1/jobs/{id}/journal"),
        read("read_job", "/v1/jobs/{id}/approvals"),
        read("read_job", "/v1/jobs/{id}/artifacts"),
        Case {
            needs: Needs {
                scope: "submit",
                others: "read_all",
                reads: true,
            },
            ..change(
                "rerun_job",
                "POST",
                "/v1/jobs/{id}/rerun",
                "submit",
                json!({}),
            )
        },
        Case {
            needs: Needs {
                scope: "submit",
                others: "read_all",
                reads: true,
            },
            ..change(
                "fork_job",
                "POST",
                "/v1/jobs/{id}/fork",
                "submit",
                json!({}),
            )
        },
        change(
            "resolve_job",
            "POST",
            "/v1/jobs/{id}/resolve",
            "operate",
            json!({"action": "retry"}),
        ),
        change(
            "decide_approval",
            "POST",
            "/v1/jobs/{id}/approvals/call-1",
            "approve",
            json!({"decision": "approve", "digest": "0"}),
        ),
        change(
            "cancel_job",
            "POST",
            "/v1/jobs/{id}/cancel",
            "operate",
            json!({}),
        ),
    ];
    let conversation_cases = [read("read_conversation", "/v1/conversations/{id}")];
    let schedule_cases = [
        read("read_schedule", "/v1/schedules/{id}"),
        change(
            "manage_schedule",
            "POST",
            "/v1/schedules/{id}/pause",
            "operate",
            json!({}),
        ),
        change(
            "manage_schedule",
            "POST",
            "/v1/schedules/{id}/resume",
            "operate",
            json!({}),
        ),
        change(
            "run_schedule",
            "POST",
            "/v1/schedules/{id}/run",
            "submit",
            json!({}),
        ),
    ];

    let mut failures = Vec::new();
    let mut cases = 0;
    let mut check = |what: String, got: (Answer, u16, Value), want: Answer| {
        cases += 1;
        if got.0 != want {
            failures.push(format!(
                "{what}: expected {want:?}, got {:?} {} {}",
                got.0, got.1, got.2
            ));
        }
    };
    for (index, (key, http)) in KEYS.iter().zip(&clients).enumerate() {
        let objects = |kind: &str| -> Vec<(Whose, String)> {
            let own = match kind {
                "job" => jobs[index].clone(),
                "conversation" => jobs[index].as_ref().map(|_| format!("conv-{}", key.name)),
                _ => jobs[index].as_ref().map(|_| format!("sched-{}", key.name)),
            };
            let other = match kind {
                "job" => other_job.clone(),
                // Another key's conversation, named with its key (ids
                // are per key: the bare id names the caller's own).
                "conversation" => "conv-owner?owner=owner".to_string(),
                // Another key's schedule by its qualified name (ids are
                // per key: the bare id names the caller's own).
                _ => "owner:sched-owner".to_string(),
            };
            let unknown = match kind {
                "job" => "0190f000-0000-7000-8000-000000000000".to_string(),
                "conversation" => "conv-nobody?owner=owner".to_string(),
                _ => "owner:sched-nobody".to_string(),
            };
            let mut out = Vec::new();
            if let Some(own) = own {
                out.push((Whose::Own, own));
            }
            if index != owner {
                out.push((Whose::Other, other));
            }
            out.push((Whose::Unknown, unknown));
            out
        };
        for (kind, table) in [
            ("job", &job_cases[..]),
            ("conversation", &conversation_cases[..]),
            ("schedule", &schedule_cases[..]),
        ] {
            for case in table {
                for (whose, id) in objects(kind) {
                    let got = ask(http, &base, case, &id).await;
                    let want = expected(key, &case.needs, whose);
                    check(
                        format!(
                            "{} {} {} as {} on {whose:?} {kind}",
                            case.action, case.method, case.path, key.name
                        ),
                        got,
                        want,
                    );
                }
            }
        }
    }
    assert!(cases > 150, "the table ran {cases} cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases answered against the policy:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Another key's object answers exactly as an unknown id: the same status
/// and the same error code, for every read of every kind of object.
#[tokio::test(flavor = "multi_thread")]
async fn another_keys_object_and_an_unknown_id_answer_alike() {
    let model = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&model.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let alice = client_as(&new_key(
        &file,
        "alice",
        &["--scopes", "submit,read,operate,approve"],
    ));
    let bob = client_as(&new_key(
        &file,
        "bob",
        &["--scopes", "submit,read,operate,approve"],
    ));
    site.put_bundle(
        "hello",
        "name: hello\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let base = daemon.url("");
    let base = base.trim_end_matches('/');
    let job: Value = bob
        .post(format!("{base}/v1/jobs"))
        .json(&json!({"bundle": "hello", "input": "hi", "run_at": "2099-01-01T00:00:00Z", "conversation_id": "conv-bob"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bobs = job["id"].as_str().unwrap();
    let unknown = "0190f000-0000-7000-8000-000000000000";
    for path in [
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/journal",
        "/v1/jobs/{id}/approvals",
        "/v1/jobs/{id}/artifacts",
        "/v1/jobs/{id}/events",
    ] {
        let get = |id: &str| {
            let request = alice.get(format!("{base}{}", path.replace("{id}", id)));
            async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                (status, body["error"]["code"].clone())
            }
        };
        assert_eq!(get(bobs).await, get(unknown).await, "{path}");
    }

    // Conversation ids are per key, on every wire that names one: a job,
    // an A2A message's contextId and an AG-UI run's threadId naming bob's
    // conversation answer exactly as a never-used id does (a conversation
    // of alice's own), and she reads only her own turns.
    for (n, id) in ["conv-bob", "conv-nobody"].into_iter().enumerate() {
        let job: Value = alice
            .post(format!("{base}/v1/jobs"))
            .json(&json!({"bundle": "hello", "input": format!("alice {n}"), "conversation_id": id}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(job["conversation_id"], id, "{job}");
        assert_eq!(job["owner"], "alice", "{job}");
        let sent: Value = alice
            .post(format!("{base}/a2a/hello"))
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m-{n}"), "role": "ROLE_USER", "contextId": id,
                            "parts": [{"text": "hi"}]},
                "configuration": {"returnImmediately": true}}}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(sent["result"]["task"]["contextId"], id, "{sent}");
        let run = alice
            .post(format!("{base}/v1/agui/hello"))
            .json(&json!({"threadId": id, "runId": format!("r-{n}"),
                          "messages": [{"id": "u1", "role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(run.status(), 200, "{id}");
        let stream = run.text().await.unwrap();
        assert!(
            stream.contains("RUN_FINISHED") && !stream.contains("RUN_ERROR"),
            "{id}: {stream}"
        );
    }
    let (status, mine) = {
        let response = alice
            .get(format!("{base}/v1/conversations/conv-bob"))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(status, 200, "{mine}");
    for turn in mine["turns"].as_array().unwrap() {
        assert_ne!(
            turn["job_id"], bobs,
            "bob's turn is not in alice's conversation"
        );
    }

    // Schedule ids are per key: making one answers alike whether or not
    // another key has that id, and each key's bare id names its own.
    let make = |http: &reqwest::Client, id: &str| {
        let request = http.post(format!("{base}/v1/schedules")).json(&json!({
            "id": id, "bundle": "hello", "cron": "0 0 1 1 *", "input": "yearly"
        }));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    };
    let (status, made) = make(&bob, "nightly").await;
    assert_eq!(
        (status, made["id"].as_str()),
        (201, Some("nightly")),
        "{made}"
    );
    let taken = make(&alice, "nightly").await;
    let free = make(&alice, "weekly").await;
    assert_eq!(taken.0, free.0, "{taken:?} {free:?}");
    assert_eq!(taken.1["id"], "nightly", "{taken:?}");
    assert_eq!(taken.1["owner"], "alice", "{taken:?}");
    assert_eq!(make(&alice, "nightly").await.0, 409, "her own id again");
    let read = |http: &reqwest::Client, id: &str| {
        let request = http.get(format!("{base}/v1/schedules/{id}"));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    };
    let (_, hers) = read(&alice, "nightly").await;
    let (_, his) = read(&bob, "nightly").await;
    assert_eq!(
        (&hers["owner"], &his["owner"]),
        (&json!("alice"), &json!("bob"))
    );
    let (bobs_status, bobs_body) = read(&alice, "bob:nightly").await;
    let (none_status, none_body) = read(&alice, "bob:never").await;
    assert_eq!(
        (bobs_status, &bobs_body["error"]["code"]),
        (none_status, &none_body["error"]["code"]),
        "another key's schedule by its qualified name reads as an unknown one"
    );
    assert_eq!(bobs_status, 404);
}

/// `delete_job` (`DELETE /v1/jobs/{id}`): a key deletes its own ended job
/// with `submit`; another key's only with `operate_all` (without it, the
/// 404 an unknown id gets); a key without `submit` gets the 403 naming the
/// scope. Apart from the table above: a delete there would take the job
/// the table's later cases ask about.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_ended_job_follows_the_policy() {
    let model = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&model.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let alice = client_as(&new_key(&file, "alice", &["--scopes", "submit,read"]));
    let bob = client_as(&new_key(&file, "bob", &["--scopes", "submit,read"]));
    let carol = client_as(&new_key(&file, "carol", &["--scopes", "read_all"]));
    let root = client_as(&new_key(
        &file,
        "root",
        &["--scopes", "submit,read,operate_all"],
    ));
    site.put_bundle(
        "hello",
        "name: hello\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let mut ended = Vec::new();
    for _ in 0..2 {
        let job: Value = alice
            .post(daemon.url("/v1/jobs"))
            .json(&json!({"bundle": "hello", "input": "hi"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = job["id"].as_str().unwrap().to_string();
        let done =
            common::daemon::wait_terminal(&alice, &daemon, &id, std::time::Duration::from_secs(60))
                .await;
        assert_eq!(done["state"], "succeeded", "{done}");
        ended.push(id);
    }
    let delete = |http: &reqwest::Client, id: &str| {
        let request = http.delete(daemon.url(&format!("/v1/jobs/{id}")));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let unknown = delete(&bob, "0190f000-0000-7000-8000-000000000000").await;
    let (status, body) = delete(&bob, &ended[0]).await;
    assert_eq!(
        (status, &body),
        (
            unknown.0,
            &unknown
                .1
                .replace("0190f000-0000-7000-8000-000000000000", &ended[0])
        ),
        "another key's job is an unknown id to bob"
    );
    let (status, body) = delete(&carol, &ended[0]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("submit"), "the 403 names the scope: {body}");
    assert_eq!(delete(&alice, &ended[0]).await.0, 204, "her own");
    assert_eq!(
        delete(&root, &ended[1]).await.0,
        204,
        "operate_all: anyone's"
    );
    for id in &ended {
        let status = alice
            .get(daemon.url(&format!("/v1/jobs/{id}")))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "deleted: {id}");
    }
}
