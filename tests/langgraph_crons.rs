//! LangGraph's crons against the real daemon (issue 53), with the real
//! clients (tests/common/langgraph.rs): a thread's cron fires on its
//! schedule and each fire is a run continuing the thread, carrying the
//! cron's metadata; a cron alone is made paused, searched, counted,
//! changed and deleted; a cron is a schedule of its key (listed in
//! `/v1/schedules`), and a key that may not manage schedules cannot
//! delete one.

mod common;

use common::daemon::{Site, client_as, get, new_key};
use common::langgraph::{ADDER, RUN_SCRIPT, driver, js_client, message_types};
use common::mock_server;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_cron_is_a_schedule_whose_fires_are_runs() {
    let server = mock_server(RUN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let key = new_key(&keys, "team", &["--scopes", "submit,read,operate"]);
    let submitter = new_key(&keys, "submitter", &["--scopes", "submit,read"]);
    site.put_bundle("adder", ADDER);
    let daemon = site.start();

    let got = driver(&daemon, &key, "crons", &[]).await;
    let on_thread = &got["on_thread"];
    let thread = on_thread["thread_id"].as_str().unwrap();
    assert_eq!(on_thread["schedule"], "* * * * * *", "{got}");
    assert_eq!(on_thread["assistant_id"], got["alone"]["assistant_id"]);
    assert_eq!(on_thread["metadata"], json!({"team": "a"}));
    assert_eq!(
        on_thread["payload"]["input"]["messages"][0]["content"],
        "hello"
    );
    assert_eq!(on_thread["enabled"], true);
    assert_eq!(on_thread["user_id"], "team");
    assert!(on_thread["next_run_date"].is_string(), "{on_thread}");
    assert_eq!(on_thread["on_run_completed"], json!(null));

    // The fire ran on the thread as a run carrying the cron's metadata.
    let runs = got["runs"].as_array().unwrap();
    let ran = runs.iter().find(|run| run["status"] == "success").unwrap();
    assert_eq!(ran["thread_id"], thread, "{ran}");
    assert_eq!(ran["metadata"], json!({"team": "a"}));
    assert_eq!(ran["assistant_id"], on_thread["assistant_id"]);
    let types = message_types(&got["state"]);
    assert_eq!(&types[..2], ["human", "ai"], "{}", got["state"]);
    // Each fire's question is its own message: never the id the cron was
    // sent with, which would merge every fire's into one.
    let asked = &got["state"]["values"]["messages"][0]["id"];
    assert!(asked.as_str().unwrap().ends_with(":in"), "{asked}");

    // The cron alone: made paused, in Berlin's time, ending in 2030.
    let alone = &got["alone"];
    assert_eq!(alone["thread_id"], json!(null));
    assert_eq!(alone["on_run_completed"], "keep");
    assert_eq!(alone["enabled"], false);
    assert_eq!(alone["next_run_date"], json!(null));
    assert_eq!(alone["timezone"], "Europe/Berlin");
    assert!(
        alone["end_time"]
            .as_str()
            .unwrap()
            .starts_with("2030-01-01T00:00:00"),
        "{alone}"
    );
    let ids = |found: &serde_json::Value| -> Vec<String> {
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["cron_id"].as_str().unwrap().to_string())
            .collect()
    };
    // Searched once the thread's cron was deleted: the one alone.
    let alone_id = alone["cron_id"].as_str().unwrap();
    assert_eq!(ids(&got["search"]), [alone_id], "{}", got["search"]);
    assert_eq!(ids(&got["search_enabled"]), [alone_id]);
    assert_eq!(ids(&got["search_metadata"]), [alone_id]);
    let selected = &got["search_select"][0];
    assert_eq!(
        selected.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["cron_id", "schedule"]
    );
    assert_eq!(
        (got["count"].clone(), got["count_assistant"].clone()),
        (json!(1), json!(1))
    );

    // Changed: its schedule, enabled, no end; the rest kept.
    let updated = &got["updated"];
    assert_eq!(updated["schedule"], "30 10 * * *", "{updated}");
    assert_eq!(updated["enabled"], true);
    assert_eq!(updated["end_time"], json!(null));
    assert_eq!(updated["metadata"], json!({"team": "c"}));
    assert_eq!(updated["timezone"], "Europe/Berlin");
    assert!(
        updated["next_run_date"].as_str().unwrap().contains("T"),
        "{updated}"
    );

    assert_eq!(got["bad_schedule"], 422);
    assert_eq!(got["bad_zone"], 422);
    assert_eq!(got["unknown_thread"], 404);
    assert_eq!(got["unknown_assistant"], 404);
    assert_eq!(got["delete_gone"], 404);
    assert_eq!(got["after"], 0);

    // A cron is a schedule of its key; deleting one needs `operate`.
    let js = js_client(&daemon, &key, "crons").await;
    assert_eq!(js["made"]["metadata"], json!({"from": "js"}), "{js}");
    assert_eq!(js["count"], 1);
    assert_eq!(js["after"], 0);
    let made = driver(&daemon, &submitter, "cron_alone", &[]).await;
    let schedules = get(&client_as(&submitter), &daemon, "/v1/schedules").await;
    assert_eq!(schedules.as_array().unwrap().len(), 1, "{schedules}");
    assert_eq!(schedules[0]["id"], made["cron_id"]);
    assert_eq!(schedules[0]["spec"]["cron"], "0 9 * * *");
    assert_eq!(made["delete"], 403, "{made}");
}
