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


async def join(client, api_key):
    """LangGraph's join of a thread (`client.threads.join_stream`): a run that
    ended before is not told, the run going on and the next are, each between
    its `metadata` and its `run_done`; joined again after an event id, what
    follows it; in `lifecycle` mode, the runs' starts and ends alone."""
    thread = (await client.threads.create())["thread_id"]

    def ask(text):
        return {"messages": [{"role": "user", "content": text}]}

    await client.runs.wait(thread, "adder", input=ask("hello"))
    slow = await client.runs.create(thread, "adder", input=ask("slow"))
    parts = []

    async def read(into, runs, **kwargs):
        ended = 0
        async for part in await client.threads.join_stream(thread, **kwargs):
            into.append({"event": part.event, "data": part.data, "id": part.id})
            if part.event == "metadata" and (part.data or {}).get("status") == "run_done":
                ended += 1
                if ended == runs:
                    return

    reader = asyncio.create_task(read(parts, 2))
    for _ in range(1200):
        if parts or reader.done():
            break
        await asyncio.sleep(0.05)
    await client.runs.cancel(thread, slow["run_id"], wait=True)
    again = await client.runs.create(thread, "adder", input=ask("again"))
    await asyncio.wait_for(reader, 60)
    slow_done = next(
        p["id"] for p in parts
        if p["event"] == "metadata" and (p["data"] or {}).get("status") == "run_done"
    )
    after, lifecycle = [], []
    await asyncio.wait_for(read(after, 1, last_event_id=slow_done), 60)
    await asyncio.wait_for(
        read(lifecycle, 1, last_event_id=slow_done, stream_mode="lifecycle"), 60
    )
    return {
        "slow": slow["run_id"],
        "again": again["run_id"],
        "parts": parts,
        "after": after,
        "lifecycle": lifecycle,
    }


async def main():
    url, api_key, scenario = sys.argv[1:4]
    client = get_client(url=url, api_key=api_key)
    scenarios = {"run": run, "interrupt": interrupt, "websocket": websocket, "join": join}
    result = await scenarios[scenario](client, api_key)
    print(json.dumps(result, default=str))


asyncio.run(main())
