"""The official `openai` SDK against the daemon's /v1/chat/completions.

Usage: client.py BASE_URL MODEL. Prints one JSON object: the models listed,
the non-streaming answer and usage, the streamed pieces, the usage a stream
ends with when asked (`stream_options.include_usage`), and the error a
missing model gets."""
import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
out = {"models": [m.id for m in client.models.list()]}

messages = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Say the magic words."},
]
done = client.chat.completions.create(model=model, messages=messages)
out["answer"] = done.choices[0].message.content
out["finish_reason"] = done.choices[0].finish_reason
out["object"] = done.object
out["usage"] = done.usage.total_tokens if done.usage else None

pieces = []
finish = None
for chunk in client.chat.completions.create(model=model, messages=messages, stream=True):
    assert chunk.object == "chat.completion.chunk", chunk
    delta = chunk.choices[0].delta
    if delta.content:
        pieces.append(delta.content)
    finish = chunk.choices[0].finish_reason or finish
out["pieces"] = pieces
out["stream_finish"] = finish

# With `include_usage`, a last chunk without choices carries the usage.
stream_usage = None
for chunk in client.chat.completions.create(
    model=model, messages=messages, stream=True, stream_options={"include_usage": True}
):
    if chunk.usage:
        stream_usage = {"total": chunk.usage.total_tokens, "choices": len(chunk.choices)}
out["stream_usage"] = stream_usage

try:
    client.chat.completions.create(model="bundle/nosuch", messages=messages)
    out["missing"] = None
except openai.NotFoundError as e:
    out["missing"] = {"status": e.status_code, "code": e.code, "message": e.message}

print(json.dumps(out))
