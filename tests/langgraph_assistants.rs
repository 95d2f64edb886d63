//! Custom assistants with LangGraph's Python SDK against the real daemon
//! (issue 53; tests/data/langgraph/driver.py `custom`): an assistant made
//! over a bundle with a variable set runs with it (a run's own variable
//! wins), changes in versions whose latest its runs use, is picked back to
//! an earlier version, is searched and read like a bundle's, and is
//! deleted; a variable its bundle does not read, a bundle the key may not
//! use, an id taken or a bundle's, and a change to a bundle's own
//! assistant are refused; another key does not see it.

mod common;

use common::daemon::{Site, client_as, new_key, post_json};
use common::langgraph::{driver, js_client};
use common::mock_server;
use serde_json::{Value, json};

/// The model answers in the language the prompt ends with.
const SCRIPT: &str = r#"
replies:
  - match: "in French"
    content: "Bonjour."
  - match: "in German"
    content: "Hallo."
  - match: "in Italian"
    content: "Ciao."
  - content: "Hello."
"#;

fn bundle(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}} in {{{{ lang }}}}\"}}\n"
    )
}

/// The last message's text of a run's values.
fn answer(values: &Value) -> &str {
    values["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_assistant_runs_its_bundle_with_its_variables_in_versions() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let key = new_key(
        &keys,
        "team",
        &["--scopes", "submit,read", "--bundles", "plain"],
    );
    let other = new_key(
        &keys,
        "other",
        &["--scopes", "submit,read", "--bundles", "plain"],
    );
    site.put_bundle("plain", &bundle("plain"));
    site.put_bundle("secret", &bundle("secret"));
    let daemon = site.start();

    let got = driver(&daemon, &key, "custom", &["secret"]).await;
    let made = &got["made"];
    let id = made["assistant_id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{made}");
    assert_eq!(
        (&made["graph_id"], &made["name"], &made["version"]),
        (&json!("plain"), &json!("french"), &json!(1))
    );
    assert_eq!(made["config"], json!({"configurable": {"lang": "French"}}));
    assert_eq!(made["metadata"], json!({"team": "a"}));
    // `if_exists: do_nothing` answers it as it stands (by then, back at
    // version 1).
    let again = &got["again"];
    assert_eq!(
        (&again["assistant_id"], &again["version"], &again["config"]),
        (&made["assistant_id"], &json!(1), &made["config"])
    );
    for (refusal, status) in [
        ("taken", 409),
        ("bundle_id", 409),
        ("unread", 422),
        ("hidden_graph", 404),
        ("bundle_update", 409),
        ("bundle_delete", 409),
        ("missing_version", 404),
    ] {
        assert_eq!(got[refusal], status, "{refusal}: {got}");
    }

    // Its runs start with its variable; a run's own wins.
    assert_eq!(answer(&got["french"]), "Bonjour.", "{}", got["french"]);
    assert_eq!(answer(&got["italian"]), "Ciao.", "{}", got["italian"]);
    assert_eq!(got["run"]["assistant_id"], id, "a run names its assistant");
    // Changed: version 2, its fields kept where absent, metadata merged.
    let updated = &got["updated"];
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["name"], "french");
    assert_eq!(updated["context"], json!({"lang": "German"}));
    assert_eq!(updated["metadata"], json!({"team": "a", "stage": "b"}));
    assert_eq!(answer(&got["german"]), "Hallo.", "{}", got["german"]);
    let versions: Vec<&Value> = got["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["version"])
        .collect();
    assert_eq!(versions, [&json!(2), &json!(1)]);
    // Version 1 picked back: its runs are French again.
    assert_eq!(got["picked"]["version"], 1);
    assert_eq!(answer(&got["french_again"]), "Bonjour.");
    assert_eq!(got["got"]["version"], 1);
    // Listed and read like a bundle's assistant.
    let found: Vec<&Value> = got["search"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["assistant_id"])
        .collect();
    assert_eq!(found, [&json!(id)]);
    assert_eq!(got["count"], 2, "the bundle's and the custom one");
    assert_eq!(got["schemas"]["graph_id"], "plain");
    assert!(
        got["graph"]["nodes"]
            .as_array()
            .is_some_and(|n| !n.is_empty())
    );
    assert_eq!(got["gone"], 404);

    // Another key has none of the key's assistants.
    let kept = got["kept"]["assistant_id"].as_str().unwrap();
    let theirs = client_as(&other);
    let read = theirs
        .get(daemon.url(&format!("/assistants/{kept}")))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 404);
    let mine = client_as(&key);
    let read = mine
        .get(daemon.url(&format!("/assistants/{kept}")))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let (status, listed) = post_json(
        &theirs,
        &daemon,
        "/assistants/search",
        json!({"limit": 100}),
    )
    .await;
    assert_eq!(status, 200);
    let ids: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["graph_id"])
        .collect();
    assert_eq!(ids, [&json!("plain")], "{listed}");

    // LangGraph's JS SDK sees the same.
    let js = js_client(&daemon, &key, "custom").await;
    assert_eq!(
        (&js["made"]["graph_id"], &js["made"]["version"]),
        (&json!("plain"), &json!(1)),
        "{js}"
    );
    assert_eq!(answer(&js["french"]), "Bonjour.", "{js}");
    assert_eq!(js["updated"]["version"], 2);
    assert_eq!(answer(&js["german"]), "Hallo.", "{js}");
    assert_eq!(js["versions"], json!([2, 1]));
    assert_eq!(js["picked"]["version"], 1);
    assert_eq!((&js["unread"], &js["gone"]), (&json!(422), &json!(404)));
}

/// An assistant is checked against its bundle when it is made, and again
/// at each run: a bundle reloaded without the variable it sets refuses its
/// runs, naming the variable (they ran without it).
#[tokio::test(flavor = "multi_thread")]
async fn a_custom_assistant_whose_bundle_stops_reading_its_variable_is_refused_by_name() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let key = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read"],
    );
    site.put_bundle("plain", &bundle("plain"));
    let daemon = site.start();
    let http = client_as(&key);
    let (status, made) = post_json(
        &http,
        &daemon,
        "/assistants",
        json!({"graph_id": "plain", "context": {"lang": "French"}}),
    )
    .await;
    assert_eq!(status, 200, "{made}");
    let id = made["assistant_id"].as_str().unwrap().to_string();
    let hello =
        json!({"assistant_id": id, "input": {"messages": [{"role": "user", "content": "hello"}]}});
    let (status, french) = post_json(&http, &daemon, "/runs/wait", hello.clone()).await;
    assert_eq!((status, answer(&french)), (200, "Bonjour."), "{french}");

    site.put_bundle(
        "plain",
        "name: plain\nversion: \"2\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let refused = common::daemon::eventually(
        std::time::Duration::from_secs(30),
        "the reloaded bundle refuses the assistant's run",
        || {
            let (http, daemon, hello) = (&http, &daemon, hello.clone());
            async move {
                let (status, body) = post_json(http, daemon, "/runs/wait", hello).await;
                (status == 422).then_some(body)
            }
        },
    )
    .await;
    assert_eq!(refused["error"]["field"], "assistant_id", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"lang\"") && message.contains("reads no variable"),
        "{message}"
    );
}
