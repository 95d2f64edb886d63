//! LangGraph's store against the real daemon (issue 53), with the real
//! clients (tests/common/langgraph.rs): items put, read, searched (by
//! namespace, filter and text query), listed by namespace and deleted
//! with the Python SDK, the same with the JS SDK, on SQLite and on the
//! local PostgreSQL; each key's store its own (another key's items are
//! unknown to it), and a key without `submit` reads but never writes.

mod common;

use common::daemon::{Site, new_key};
use common::langgraph::{driver, js_client};
use common::mock_server;
use common::postgres::Schema;
use serde_json::{Value, json};

/// The `"ns/key"` of each item of a search answer, in order.
fn found(search: &Value) -> Vec<String> {
    search["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {search}"))
        .iter()
        .map(|item| {
            let namespace: Vec<&str> = item["namespace"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            format!("{}/{}", namespace.join("."), item["key"].as_str().unwrap())
        })
        .collect()
}

/// What the driver's `store` scenario must have been answered, whatever
/// the queue's database.
fn check_store(got: &Value) {
    let item = &got["get"];
    assert_eq!(item["namespace"], json!(["docs", "team"]), "{got}");
    assert_eq!(item["key"], "a");
    assert_eq!(
        item["value"],
        json!({"title": "Durable agents", "year": 2026})
    );
    assert!(
        item["created_at"].as_str().unwrap().ends_with('Z'),
        "{item}"
    );
    assert_eq!(item["created_at"], item["updated_at"]);
    assert_eq!(
        got["get_unrefreshed"]["value"],
        json!({"text": "likes tea"})
    );
    assert_eq!(got["missing"], 404);

    // Under `docs`: the most recently updated first; not `memories`.
    assert_eq!(
        found(&got["search_all"]),
        ["docs.other/c", "docs.team/b", "docs.team/a"]
    );
    assert_eq!(found(&got["search_everything"]).len(), 4);
    assert_eq!(found(&got["search_filter"]), ["docs.team/b", "docs.team/a"]);
    assert_eq!(found(&got["search_eq"]), ["docs.team/b"]);
    // A text query ranks by the share of its words an item's indexed
    // fields hold; `c` was put with `index: false` and is never found so.
    assert_eq!(found(&got["search_query"]), ["docs.team/a", "docs.team/b"]);
    let scores: Vec<f64> = got["search_query"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores, [1.0, 0.0]);
    assert!(got["search_all"]["items"][0].get("score").is_none());
    assert_eq!(found(&got["search_page"]), ["docs.team/b"]);
    assert_eq!(got["bad_filter"], 422);
    assert_eq!(got["bad_label"], 422);
    assert_eq!(got["too_big"], 422, "an item holds at most 64 KiB");

    assert_eq!(
        got["namespaces"]["namespaces"],
        json!([["docs", "other"], ["docs", "team"], ["memories"]])
    );
    assert_eq!(
        got["namespaces_prefix"]["namespaces"],
        json!([["docs", "other"], ["docs", "team"]])
    );
    assert_eq!(
        got["namespaces_depth"]["namespaces"],
        json!([["docs"], ["memories"]])
    );
    assert_eq!(
        got["namespaces_suffix"]["namespaces"],
        json!([["docs", "team"]])
    );
    assert_eq!(
        got["namespaces_wildcard"]["namespaces"],
        json!([["docs", "other"]])
    );
    // A delete is answered alike whether there was an item.
    assert_eq!(got["deleted"], 404);
    assert_eq!(got["deleted_again"], 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_is_each_keys_own_with_the_python_and_js_clients() {
    let server = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let team = new_key(&keys, "team", &["--scopes", "submit,read"]);
    let other = new_key(&keys, "other", &["--scopes", "submit,read"]);
    let reader = new_key(&keys, "reader", &["--scopes", "read"]);
    let daemon = site.start();

    check_store(&driver(&daemon, &team, "store", &[]).await);

    // Another key's store is another store: nothing of the team's shows.
    let peek = driver(&daemon, &other, "store_peek", &[]).await;
    assert_eq!(peek["get"], 404, "{peek}");
    assert_eq!(peek["search"]["items"], json!([]));
    assert_eq!(peek["namespaces"]["namespaces"], json!([]));
    assert_eq!(peek["put"], 200);
    // A key that may only read reads its own (empty) store, never writes.
    let peek = driver(&daemon, &reader, "store_peek", &[]).await;
    assert_eq!(peek["get"], 404, "{peek}");
    assert_eq!(peek["put"], 403);

    let js = js_client(&daemon, &team, "store").await;
    assert_eq!(
        js["got"]["value"],
        json!({"title": "Durable agents", "year": 2026}),
        "{js}"
    );
    assert_eq!(js["unrefreshed"]["value"], json!({"text": "soon gone"}));
    assert_eq!(js["missing"], 404);
    assert_eq!(found(&js["search"]), ["js.notes/n2"]);
    // `n2` was put with `index: false`; `b` holds none of the words.
    assert_eq!(found(&js["query"]), ["js.notes/n1", "js.brief/b"]);
    assert_eq!(
        js["namespaces"]["namespaces"],
        json!([["js", "brief"], ["js", "notes"]])
    );
    assert_eq!(js["deleted"], 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_keeps_items_in_postgresql() {
    let schema = Schema::fresh();
    let server = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let team = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read"],
    );
    let daemon = site.start_with_env(&schema.daemon_env());
    check_store(&driver(&daemon, &team, "store", &[]).await);
}
