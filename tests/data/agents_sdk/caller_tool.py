"""The OpenAI Agents SDK (`openai-agents`) with a tool of its own (a
`@function_tool` the client runs) against a bundle that takes caller tools.

Usage: caller_tool.py BASE_URL CLASS MODEL, CLASS `responses`
(OpenAIResponsesModel, chaining with previous_response_id) or `chat`
(OpenAIChatCompletionsModel). Prints one JSON object: the final answer, each
call the tool got (its argument), and the run's items.
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

base, model_class, model_name = sys.argv[1:4]
set_tracing_disabled(True)
client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)
calls = []


@function_tool
def shout(text: str) -> str:
    """Shouts the text."""
    calls.append(text)
    return text.upper() + "!"


async def main():
    if model_class == "responses":
        model = OpenAIResponsesModel(model=model_name, openai_client=client)
        extra = {"auto_previous_response_id": True}
    else:
        model = OpenAIChatCompletionsModel(model=model_name, openai_client=client)
        extra = {}
    agent = Agent(name="daemon", instructions="You are helpful.", model=model, tools=[shout])
    result = await Runner.run(agent, "Shout hi.", **extra)
    items = []
    for item in result.new_items:
        raw = item.raw_item
        raw_type = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
        items.append({"kind": item.type, "type": raw_type})
    print(json.dumps({"final": result.final_output, "calls": calls, "items": items}), flush=True)


asyncio.run(main())
