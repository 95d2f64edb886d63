//! The stream's numbering and its modes, without a daemon.

use super::*;

fn run() -> RunInfo {
    RunInfo {
        job: "j".into(),
        thread: Some("t".into()),
        graph: "adder".into(),
        assistant: "a".into(),
        prior: vec![json!({"type": "human", "id": "old:in"})],
        namespace: Vec::new(),
    }
}

fn steps() -> Vec<Step> {
    let step = |kind, message| Step { kind, message };
    vec![
        step(StepKind::Input, json!({"type": "human", "id": "j:in"})),
        step(
            StepKind::Reply { turn: 1, calls: 1 },
            json!({"type": "ai", "id": "j:t1", "content": "", "tool_calls": [{"name": "add", "args": {}, "id": "c"}]}),
        ),
        step(
            StepKind::Result {
                turn: 1,
                position: 0,
                last: true,
                nested: false,
            },
            json!({"type": "tool", "id": "j:t1:0", "tool_call_id": "c", "name": "add"}),
        ),
        step(
            StepKind::Reply { turn: 2, calls: 0 },
            json!({"type": "ai", "id": "j:t2", "content": "5", "tool_calls": []}),
        ),
    ]
}

/// Every numbered frame of the run told from the start of its log, each
/// step at its own stored event, as a feed tells it.
fn told(after: Option<u64>) -> Vec<Frame> {
    let all = Modes::read(["values", "updates", "messages-tuple", "debug"]).unwrap();
    let mut translator = Translator::new(run(), all, after);
    let steps = steps();
    translator.at(0);
    let mut frames = translator.steps(&steps, 1);
    for (seq, upto) in [(3, 2), (5, 3), (8, 4)] {
        translator.at(seq);
        frames.extend(translator.steps(&steps, upto));
    }
    translator.at(9);
    frames.extend(translator.ended(Ending::Done));
    frames
}

#[test]
fn events_are_numbered_by_where_they_stand_and_resume_after_an_id() {
    let frames = told(None);
    let ids: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(ids[0], 0);
    assert!(ids.contains(&(3 * PER_EVENT)));
    let values: Vec<&Frame> = frames.iter().filter(|f| f.event == "values").collect();
    assert_eq!(values.len(), 4);
    assert_eq!(values[3].data["messages"].as_array().unwrap().len(), 5);
    assert_eq!(frames.last().unwrap().event, "end");
    // Resumed after any id: exactly the numbered frames after it.
    for after in ids.iter().copied() {
        let rest: Vec<Frame> = told(Some(after))
            .into_iter()
            .filter(|f| f.id.is_some())
            .collect();
        let expected: Vec<&Frame> = frames.iter().filter(|f| f.id > Some(after)).collect();
        assert_eq!(rest.iter().collect::<Vec<_>>(), expected, "after {after}");
    }
}

#[test]
fn an_unknown_mode_is_refused_by_name_and_none_is_values() {
    let err = Modes::read(["values", "tools"]).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("stream_mode"));
    assert!(err.message.contains("\"tools\""), "{}", err.message);
    assert_eq!(Modes::read(["", ""]).unwrap(), Modes::default());
    assert_eq!(
        Modes::of_value(Some(&json!("updates"))).unwrap(),
        Modes::read(["updates"]).unwrap()
    );
}
