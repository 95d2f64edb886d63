//! Tests of `events::live`.

use super::*;

fn progress(kind: ProgressKind) -> Progress {
    Progress {
        run_id: "j1".into(),
        turn: 2,
        at: "2026-11-26T23:10:00.123Z".into(),
        kind,
    }
}

fn text(item: Option<Live>) -> String {
    match item {
        Some(Live::Token(token)) => token.text,
        other => panic!("not a token: {other:?}"),
    }
}

#[tokio::test]
async fn tokens_reach_listeners_of_their_job_only_while_they_listen() {
    let hub = LiveHub::new();
    let observer = LiveObserver::new(hub.clone(), "j1");
    assert!(!observer.wants_tokens());
    let mut sub = hub.subscribe("j1", Wants::default());
    let mut other = hub.subscribe("j2", Wants::default());
    assert!(observer.wants_tokens());
    for piece in ["Hel", "lo"] {
        observer.on_token(TokenDelta {
            run_id: "j1",
            turn: 1,
            text: piece,
        });
    }
    assert_eq!(text(sub.next().await), "Hel");
    assert_eq!(text(sub.next().await), "lo");
    assert!(other.try_next().is_none());
    drop(sub);
    assert!(!observer.wants_tokens());
    assert!(hub.listening("j2"));
    drop(other);
    assert!(hub.streams.lock().unwrap().senders.is_empty());
}

/// Progress goes only to subscriptions that asked for it, in the order
/// it was published among the tokens.
#[tokio::test]
async fn progress_reaches_only_the_subscriptions_that_want_it_in_order() {
    let hub = LiveHub::new();
    let observer = LiveObserver::new(hub.clone(), "j1");
    let mut answer_only = hub.subscribe("j1", Wants::default());
    let wants = Wants {
        calls: false,
        progress: true,
    };
    let mut watcher = hub.subscribe("j1", wants);
    observer.on_progress(&progress(ProgressKind::ModelCallStarted {
        model: "m".into(),
        messages: 3,
        attempt: 1,
    }));
    observer.on_token(TokenDelta {
        run_id: "j1",
        turn: 2,
        text: "Hi",
    });
    observer.on_progress(&progress(ProgressKind::ModelCallEnded {
        ok: true,
        error: None,
    }));
    assert_eq!(text(answer_only.try_next()), "Hi");
    assert!(answer_only.try_next().is_none());
    let kinds: Vec<String> = std::iter::from_fn(|| watcher.try_next())
        .map(|item| match item {
            Live::Progress(p) => serde_json::to_value(&*p).unwrap()["kind"].to_string(),
            Live::Token(t) => t.text,
        })
        .collect();
    assert_eq!(
        kinds,
        ["\"model_call_started\"", "Hi", "\"model_call_ended\""]
    );
}

/// A watcher that connects (or reconnects) during a call is told of it
/// first; once it ended, or its attempt is over, nobody is.
#[tokio::test]
async fn a_late_watcher_learns_the_calls_in_progress_first() {
    let hub = LiveHub::new();
    let observer = LiveObserver::new(hub.clone(), "j1");
    let wants = Wants {
        calls: false,
        progress: true,
    };
    let tool = |kind| Progress {
        kind,
        ..progress(ProgressKind::ModelCallEnded {
            ok: true,
            error: None,
        })
    };
    observer.on_progress(&progress(ProgressKind::ModelCallStarted {
        model: "m".into(),
        messages: 3,
        attempt: 1,
    }));
    observer.on_progress(&tool(ProgressKind::ToolCallStarted {
        call_id: "c1".into(),
        tool: "slow".into(),
        arguments: serde_json::json!({}),
    }));
    observer.on_progress(&progress(ProgressKind::ModelCallEnded {
        ok: true,
        error: None,
    }));
    let kind = |item: Option<Live>| match item {
        Some(Live::Progress(p)) => serde_json::to_value(&*p).unwrap()["kind"].to_string(),
        other => panic!("not progress: {other:?}"),
    };
    let mut late = hub.subscribe("j1", wants);
    assert_eq!(kind(late.try_next()), "\"tool_call_started\"");
    assert!(late.try_next().is_none());
    let mut answer_only = hub.subscribe("j1", Wants::default());
    assert!(
        answer_only.try_next().is_none(),
        "progress only to those who want it"
    );
    observer.on_progress(&tool(ProgressKind::ToolCallEnded {
        call_id: "c1".into(),
        tool: "slow".into(),
        ok: true,
        output: "done".into(),
        duration_ms: 5,
        error_type: None,
    }));
    assert_eq!(kind(late.try_next()), "\"tool_call_ended\"");
    assert!(hub.subscribe("j1", wants).try_next().is_none());
    observer.on_progress(&tool(ProgressKind::ToolCallStarted {
        call_id: "c2".into(),
        tool: "slow".into(),
        arguments: serde_json::json!({}),
    }));
    drop(observer);
    assert!(
        hub.subscribe("j1", wants).try_next().is_none(),
        "the attempt is over"
    );
}

/// The frame's JSON is the contract's: flat, `kind` tagged, `for` for
/// waits, nulls kept.
#[test]
fn progress_serializes_as_the_frame_contract_says() {
    let frame = serde_json::to_value(progress(ProgressKind::Waiting {
        waiting_for: WaitFor::ModelSlot,
        until: None,
        call_id: None,
        tool: None,
    }))
    .unwrap();
    assert_eq!(
        frame,
        serde_json::json!({"run_id": "j1", "turn": 2, "at": "2026-11-26T23:10:00.123Z",
                "kind": "waiting", "for": "model_slot", "until": null, "call_id": null, "tool": null})
    );
    let started = serde_json::to_value(progress(ProgressKind::ModelCallStarted {
        model: "m".into(),
        messages: 3,
        attempt: 2,
    }))
    .unwrap();
    assert_eq!(started["kind"], "model_call_started");
    assert_eq!(
        (started["messages"].as_u64(), started["attempt"].as_u64()),
        (Some(3), Some(2))
    );
}

#[test]
fn large_arguments_are_cut_small_ones_kept() {
    let small = serde_json::json!({"a": 1});
    assert_eq!(capped_arguments(&small), small);
    let large = serde_json::json!({"text": "x".repeat(ARGUMENTS_CAP * 2)});
    let cut = capped_arguments(&large);
    let cut = cut.as_str().unwrap();
    assert_eq!(cut.chars().count(), ARGUMENTS_CAP + 1, "cut and marked");
    assert!(cut.ends_with('…'));
}
