"""The OpenAI Agents SDK (`openai-agents`) against the daemon.

Usage: driver.py BASE_URL CLASS PLAIN_MODEL TOOLS_MODEL, CLASS `responses`
(OpenAIResponsesModel, the SDK's default) or `chat`
(OpenAIChatCompletionsModel). Runs an agent on each bundle as a model: a
plain run, a run of the bundle whose tools the daemon runs, a next turn
with that run's history as input, the same streamed (`Runner.run_streamed`), and an agent with a tool of its own,
which the daemon refuses. Prints one JSON object.
"""
import asyncio
import json
import sys

import openai
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

base, model_class, plain_model, tools_model = sys.argv[1:5]
# The SDK exports its traces to OpenAI by default: nothing leaves the test.
set_tracing_disabled(True)
client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)


def model(name):
    if model_class == "responses":
        return OpenAIResponsesModel(model=name, openai_client=client)
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def agent(name, tools=()):
    return Agent(name="daemon", instructions="You are helpful.", model=model(name), tools=list(tools))


def items(result):
    """The run's items: the SDK's kind, and the wire item's type."""
    out = []
    for item in result.new_items:
        raw = item.raw_item
        raw_type = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
        out.append({"kind": item.type, "type": raw_type,
                    "output": getattr(raw, "output", None), "name": getattr(raw, "name", None)})
    return out


@function_tool
def shout(text: str) -> str:
    """Shouts the text."""
    return text.upper()


async def main():
    seen = {}
    plain = await Runner.run(agent(plain_model), "Say hello.")
    seen["plain"] = plain.final_output
    tools = await Runner.run(agent(tools_model), "What is 2+3?")
    seen["tools"] = {"final": tools.final_output, "items": items(tools)}
    # The next turn sends the run's history back, the daemon's calls in it.
    follow = await Runner.run(agent(tools_model), tools.to_input_list() + [
        {"role": "user", "content": "Once again?"}])
    seen["follow"] = follow.final_output
    streamed = Runner.run_streamed(agent(tools_model), "What is 2+3?")
    kinds, deltas = [], []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event":
            kinds.append(event.data.type)
            if event.data.type in ("response.output_text.delta",) or (
                model_class == "chat" and event.data.type == "response.output_text.delta"
            ):
                deltas.append(event.data.delta)
        else:
            kinds.append(event.type)
    seen["streamed"] = {"final": streamed.final_output, "events": kinds,
                        "deltas": deltas, "items": items(streamed)}
    try:
        await Runner.run(agent(tools_model, [shout]), "Shout hi.")
        seen["own_tool"] = None
    except openai.BadRequestError as e:
        seen["own_tool"] = {"status": e.status_code, "param": e.param, "code": e.code,
                            "message": e.message}
    print(json.dumps(seen), flush=True)


asyncio.run(main())
