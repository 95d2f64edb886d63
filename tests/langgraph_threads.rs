//! LangGraph's thread housekeeping against the real daemon (issue 53),
//! with the real Python client: threads pruned several at once, each as a
//! delete deletes one, and `keep_latest` refused by name.

mod common;

use common::daemon::{Site, new_key};
use common::langgraph::driver;
use common::mock_server;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn threads_are_pruned_as_deleted_one_by_one() {
    let server = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let key = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read"],
    );
    let daemon = site.start();

    let got = driver(&daemon, &key, "prune", &[]).await;
    assert_eq!(got["pruned"], json!({"pruned_count": 2}), "{got}");
    assert_eq!(got["one"], 404);
    assert_eq!(got["again"], json!({"pruned_count": 0}));
    assert_eq!(got["keep_latest"], 422);
}
