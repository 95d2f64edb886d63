"""The OpenAI Agents SDK's `output_type` against the daemon.

Usage: output_type.py BASE_URL CLASS MODEL, CLASS `responses`
(OpenAIResponsesModel) or `chat` (OpenAIChatCompletionsModel). Runs an agent
whose `output_type` is a pydantic model on the bundle MODEL: "Who is Ada?"
(the model answers a matching person), the same streamed, and "Who is
Bob?" (the model's answer does not match, so the daemon fails it). Prints
one JSON object.
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
    set_tracing_disabled,
)
from pydantic import BaseModel

base, model_class, model_name = sys.argv[1:4]
set_tracing_disabled(True)
client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)


class Person(BaseModel):
    name: str
    age: int


def agent():
    if model_class == "responses":
        model = OpenAIResponsesModel(model=model_name, openai_client=client)
    else:
        model = OpenAIChatCompletionsModel(model=model_name, openai_client=client)
    return Agent(name="people", instructions="Answer with a person.", model=model,
                 output_type=Person)


def typed(output):
    return {"type": type(output).__name__, "value": output.model_dump()}


async def main():
    seen = {}
    ada = await Runner.run(agent(), "Who is Ada?")
    seen["ada"] = typed(ada.final_output)
    streamed = Runner.run_streamed(agent(), "Who is Ada, streamed?")
    async for _ in streamed.stream_events():
        pass
    seen["streamed"] = typed(streamed.final_output)
    try:
        bob = await Runner.run(agent(), "Who is Bob?")
        seen["bob"] = {"output": repr(bob.final_output)}
    except Exception as e:  # the failure, whatever the model class makes of it
        seen["bob"] = {"error": type(e).__name__, "message": str(e),
                       "status": getattr(e, "status_code", None)}
    print(json.dumps(seen), flush=True)


asyncio.run(main())
