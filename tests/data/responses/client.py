"""The official `openai` SDK against the daemon's /v1/responses.

Usage: client.py BASE_URL MODEL MODE [ARGS]. Prints one JSON line per event
(`stream`, `resume`) or one JSON object (`finish`, `cancel`), flushed, so the
test can act mid-stream.

- stream INPUT: a background streamed response; each event as it arrives.
- live INPUT: a streamed (not background) response; each event.
- resume ID AFTER: retrieve(ID, stream=True, starting_after=AFTER); each event.
- finish ID INPUT: the finished response's text, a non-streamed create of the
  same input, and a follow-up with previous_response_id.
- cancel INPUT: a background response, cancelled; its status until final.
- items INPUT: a response made from a chat with instructions, then its
  input items listed (newest first, oldest first, a page of one and the
  page after it) and those of a follow-up; then the first response
  deleted, and retrieving it a 404.
"""
import json
import sys
import time

import openai

base, model, mode = sys.argv[1], sys.argv[2], sys.argv[3]
args = sys.argv[4:]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)


def emit(value):
    print(json.dumps(value), flush=True)


if mode == "stream":
    for event in client.responses.create(model=model, input=args[0], background=True, stream=True):
        emit(event.model_dump(mode="json"))
elif mode == "live":
    with client.responses.stream(model=model, input=args[0]) as stream:
        for event in stream:
            emit(event.model_dump(mode="json"))
        emit({"type": "final", "text": stream.get_final_response().output_text})
elif mode == "resume":
    for event in client.responses.retrieve(args[0], stream=True, starting_after=int(args[1])):
        emit(event.model_dump(mode="json"))
elif mode == "finish":
    done = client.responses.retrieve(args[0])
    again = client.responses.create(model=model, input=args[1])
    follow = client.responses.create(model=model, input="And again?", previous_response_id=again.id)
    emit({"status": done.status, "text": done.output_text,
          "output_types": [item.type for item in done.output],
          "again_status": again.status, "again_text": again.output_text,
          "again_usage": again.usage.total_tokens if again.usage else None,
          "follow_status": follow.status, "follow_text": follow.output_text,
          "again_id": again.id, "again_previous": again.previous_response_id,
          "follow_previous": follow.previous_response_id,
          "follow_previous_retrieved": client.responses.retrieve(follow.id).previous_response_id})
elif mode == "cancel":
    started = client.responses.create(model=model, input=args[0], background=True)
    cancelled = client.responses.cancel(started.id)
    status = cancelled.status
    deadline = time.monotonic() + 30
    while status not in ("cancelled", "completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        status = client.responses.retrieve(started.id).status
    try:
        client.responses.retrieve("resp_nope")
        missing = None
    except openai.NotFoundError as e:
        missing = {"status": e.status_code, "code": e.code}
    emit({"started": started.status, "id": started.id, "final": status, "missing": missing})
elif mode == "items":
    made = client.responses.create(
        model=model, instructions="Be brief.",
        input=[{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": args[0]}])
    def listed(page):
        return {"ids": [item.id for item in page.data],
                "roles": [item.role for item in page.data],
                "texts": [item.content[0].text for item in page.data],
                "parts": [item.content[0].type for item in page.data],
                "has_more": page.has_more, "first_id": page.first_id, "last_id": page.last_id}
    newest = client.responses.input_items.list(made.id)
    oldest = client.responses.input_items.list(made.id, order="asc")
    one = client.responses.input_items.list(made.id, order="asc", limit=1)
    after = client.responses.input_items.list(made.id, order="asc", limit=1, after=one.data[0].id)
    follow = client.responses.create(model=model, input="And then?", previous_response_id=made.id)
    follow_items = listed(client.responses.input_items.list(follow.id))
    client.responses.delete(made.id)
    try:
        client.responses.retrieve(made.id)
        gone = None
    except openai.NotFoundError as e:
        gone = {"status": e.status_code, "code": e.code}
    emit({"newest": listed(newest), "oldest": listed(oldest), "one": listed(one),
          "after": listed(after), "follow": follow_items, "deleted": gone})
else:
    sys.exit(f"unknown mode {mode}")
