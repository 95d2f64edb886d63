//! API keys managed over the API (`/v1/keys`, `admin` only) on the real
//! daemon, beside `structured-agents keys`: a key made over the API is in
//! the file the CLI lists and works at once; a taken name, an unusable key
//! and an unknown name are refused, the file untouched; a change the
//! reload rejects is undone in the file; only `admin` may ask.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Daemon, Site, client_as, new_key};
use common::mock_server;
use serde_json::{Value, json};

async fn call(daemon: &Daemon, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let mut request = client_as(token).request(method.parse().unwrap(), daemon.url(path));
    if method != "GET" {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn listed(site: &Site) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["keys", "list", "--file"])
        .arg(site.path().join("keys.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_made_and_revoked_over_the_api_are_the_clis_and_apply_at_once() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let admin = new_key(&file, "ops", &["--scopes", "admin"]);
    let operator = new_key(&file, "night", &["--scopes", "operate_all,read_all"]);
    let daemon = site.start();

    let (status, refused) = call(&daemon, &operator, "GET", "/v1/keys", json!({})).await;
    assert_eq!(status, 403, "only admin manages keys: {refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`admin`")
    );

    let body = json!({"name": "robot", "scopes": ["submit", "read"], "rate_per_minute": 5});
    let (status, made) = call(&daemon, &admin, "POST", "/v1/keys", body.clone()).await;
    assert_eq!(status, 201, "{made}");
    let token = made["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("sa_"), "{made}");
    assert!(listed(&site).contains("robot"), "the CLI lists it");
    assert!(!std::fs::read_to_string(&file).unwrap().contains(&token));
    let (status, me) = call(&daemon, &token, "GET", "/v1/whoami", json!({})).await;
    assert_eq!((status, me["name"].as_str()), (200, Some("robot")), "{me}");

    let before = std::fs::read_to_string(&file).unwrap();
    let (status, taken) = call(&daemon, &admin, "POST", "/v1/keys", body).await;
    assert_eq!(
        (status, taken["error"]["field"].as_str()),
        (409, Some("name")),
        "{taken}"
    );
    let bad = json!({"name": "x/y", "scopes": ["read"]});
    let (status, unusable) = call(&daemon, &admin, "POST", "/v1/keys", bad).await;
    assert_eq!(status, 422, "{unusable}");
    let (status, unknown) = call(&daemon, &admin, "DELETE", "/v1/keys/nobody", json!({})).await;
    assert_eq!(status, 404, "{unknown}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        before,
        "refusals change nothing"
    );

    // A config the reload rejects: the change is undone and refused.
    let config = site.path().join("config.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}\n[queue\n")).unwrap();
    let (status, rejected) = call(&daemon, &admin, "DELETE", "/v1/keys/robot", json!({})).await;
    assert_eq!(status, 409, "{rejected}");
    assert!(
        rejected["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is as it was"),
        "{rejected}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "undone");
    let (status, _) = call(&daemon, &token, "GET", "/v1/whoami", json!({})).await;
    assert_eq!(status, 200, "the key still works");

    std::fs::write(&config, good).unwrap();
    let (status, revoked) = call(&daemon, &admin, "DELETE", "/v1/keys/robot", json!({})).await;
    assert_eq!(
        (status, revoked["key"]["name"].as_str()),
        (200, Some("robot")),
        "{revoked}"
    );
    assert!(!listed(&site).contains("robot"));
    let (status, _) = call(&daemon, &token, "GET", "/v1/whoami", json!({})).await;
    assert_eq!(status, 401, "refused at once");

    // No revocation over the API locks its caller out or leaves no admin
    // key (an empty keys file would open the daemon to anyone): the only
    // admin revoking itself is refused, naming the CLI.
    let (status, refused) = call(&daemon, &admin, "DELETE", "/v1/keys/ops", json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["field"], "name", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("structured-agents keys revoke"),
        "{refused}"
    );
    let second = new_key(&file, "ops2", &["--scopes", "admin"]);
    let (status, _) = call(&daemon, &admin, "POST", "/v1/reload", json!({})).await;
    assert_eq!(status, 200);
    let (status, refused) = call(&daemon, &second, "DELETE", "/v1/keys/ops2", json!({})).await;
    assert_eq!(status, 409, "itself: {refused}");
    let (status, revoked) = call(&daemon, &second, "DELETE", "/v1/keys/ops", json!({})).await;
    assert_eq!(status, 200, "another admin may: {revoked}");
    assert!(listed(&site).contains("ops2"));
}
