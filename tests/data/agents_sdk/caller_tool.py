"""The OpenAI Agents SDK (`openai-agents`) with a tool of its own (a
`@function_tool` the client runs) against a bundle that takes caller tools.

Usage: caller_tool.py BASE_URL CLASS MODEL [streamed | hold=DIR], CLASS
`responses` (OpenAIResponsesModel, chaining with previous_response_id) or
`chat` (OpenAIChatCompletionsModel); `streamed` runs it with
`Runner.run_streamed` (every request with `stream: true`, the resume too);
`hold=DIR` makes the tool write DIR/tool-started and wait for DIR/go (the
test kills and restarts the daemon meanwhile). Prints one JSON object:
the final answer, each call the tool got (its argument), the run's items,
and streamed the raw events' types and the answer's text deltas.
"""
import asyncio
import json
import os
import sys
import time

import openai
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

base, model_class, model_name = sys.argv[1:4]
streamed = sys.argv[4:5] == ["streamed"]
hold = next((arg[5:] for arg in sys.argv[4:] if arg.startswith("hold=")), None)
set_tracing_disabled(True)
client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)
calls = []


@function_tool
def shout(text: str) -> str:
    """Shouts the text."""
    calls.append(text)
    if hold:
        open(os.path.join(hold, "tool-started"), "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(hold, "go")):
            if time.monotonic() > deadline:
                raise SystemExit("the test never said go")
            time.sleep(0.05)
    return text.upper() + "!"


async def main():
    if model_class == "responses":
        model = OpenAIResponsesModel(model=model_name, openai_client=client)
        extra = {"auto_previous_response_id": True}
    else:
        model = OpenAIChatCompletionsModel(model=model_name, openai_client=client)
        extra = {}
    agent = Agent(name="daemon", instructions="You are helpful.", model=model, tools=[shout])
    seen = {}
    if streamed:
        result = Runner.run_streamed(agent, "Shout hi.", **extra)
        events, deltas = [], []
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                events.append(event.data.type)
                if event.data.type == "response.output_text.delta":
                    deltas.append(event.data.delta)
        seen = {"events": events, "deltas": deltas}
    else:
        result = await Runner.run(agent, "Shout hi.", **extra)
    items = []
    for item in result.new_items:
        raw = item.raw_item
        raw_type = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
        items.append({"kind": item.type, "type": raw_type})
    seen.update({"final": result.final_output, "calls": calls, "items": items})
    print(json.dumps(seen), flush=True)


asyncio.run(main())
