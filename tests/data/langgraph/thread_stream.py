"""LangGraph's Python SDK's thread streaming (`client.threads.stream`: the Agent
Protocol's POST /threads/{id}/stream/events and /threads/{id}/commands) against the
daemon: one scenario per subcommand, what the SDK returned printed as one JSON
document on stdout, for tests/agent_protocol_stream.rs to check.

    thread_stream.py URL API_KEY SCENARIO
"""

import asyncio
import json
import sys

from langgraph_sdk import get_client

EVERY_CHANNEL = [
    "lifecycle", "input", "values", "updates", "messages", "tools", "checkpoints",
    "tasks", "custom",
]


async def run(client, api_key):
    """A run started on a thread the SDK names (made by its first run): every
    event of every channel until the run ends, its messages as the SDK rebuilds
    them, and its output."""
    async with client.threads.stream(assistant_id="adder") as thread:
        started = await thread.run.start(
            input={"messages": [{"role": "user", "content": "2+3"}]}
        )
        events = [event async for event in thread.subscribe(EVERY_CHANNEL)]
        output = await thread.output.with_timeout(60)
        thread_id = thread.thread_id
    async with client.threads.stream(thread_id, assistant_id="adder") as again:
        texts = []
        async for message in again.messages:
            texts.append(message)
        replayed = [await message.text for message in texts]
    return {
        "started": started,
        "thread_id": thread_id,
        "events": events,
        "output": output,
        "replayed_texts": replayed,
        "state": await client.threads.get_state(thread_id),
    }


async def interrupt(client, api_key):
    """A run parked for a person: the interrupt the SDK reads from the stream,
    answered with `thread.run.respond` (an edit); the run goes on to its end."""
    async with client.threads.stream(assistant_id="payer") as thread:
        await thread.run.start(input={"messages": [{"role": "user", "content": "pay 5"}]})
        values = [snapshot async for snapshot in thread.values]
        for _ in range(600):
            if thread.interrupted:
                break
            await asyncio.sleep(0.05)
        interrupts = list(thread.interrupts)
        interrupted = thread.interrupted
        edit = {"type": "edit", "edited_action": {"name": "pay", "args": {"amount": 7}}}
        answered = await thread.run.respond(edit)
        output = await thread.output.with_timeout(60)
        thread_id = thread.thread_id
    return {
        "values": values,
        "interrupted": interrupted,
        "interrupts": interrupts,
        "answered": answered,
        "output": output,
        "state": await client.threads.get_state(thread_id),
    }


async def websocket(client, api_key):
    """A run whose events come over a WebSocket (its handshake sends only the
    stream's own headers: the key goes there), its output."""
    headers = {"x-api-key": api_key}
    async with client.threads.stream(
        assistant_id="adder", transport="websocket", headers=headers
    ) as thread:
        started = await thread.run.start(
            input={"messages": [{"role": "user", "content": "2+3"}]}
        )
        events = [event async for event in thread.subscribe(EVERY_CHANNEL)]
        output = await thread.output.with_timeout(60)
        thread_id = thread.thread_id
    return {
        "started": started,
        "events": events,
        "output": output,
        "state": await client.threads.get_state(thread_id),
    }


async def main():
    url, api_key, scenario = sys.argv[1:4]
    client = get_client(url=url, api_key=api_key)
    scenarios = {"run": run, "interrupt": interrupt, "websocket": websocket}
    result = await scenarios[scenario](client, api_key)
    print(json.dumps(result, default=str))


asyncio.run(main())
