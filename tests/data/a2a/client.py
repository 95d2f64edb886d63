"""The A2A 1.0 Python SDK (a2a-sdk) against the daemon, for tests/a2a.rs.

Usage: client.py BASE_URL TOKEN. Reads the cards, sends (blocking and
streaming), gets, lists, cancels, subscribes, answers an approval, and
provokes the errors; prints one JSON object with what it saw, or fails.
"""

import asyncio
import json
import sys
import uuid

import httpx

from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

BASE, TOKEN = sys.argv[1], sys.argv[2]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def message(text, task_id=None, context_id=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    return m


def state(task):
    return TaskState.Name(task.status.state)


def answer_of(task):
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def client(bundle, http, streaming):
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return await create_client(
        f"{BASE}/a2a/{bundle}", client_config=config, resolver_http_kwargs={"headers": AUTH}
    )


async def last_task(stream):
    """The task a non-streaming send answers with."""
    async for event in stream:
        return event.task


async def collect(stream):
    """Every event of a stream, as (kind, state or text)."""
    seen = []
    async for event in stream:
        if event.HasField("task"):
            seen.append(["task", state(event.task), event.task.id])
        elif event.HasField("status_update"):
            status = event.status_update.status
            data = [json_format.MessageToDict(p.data) for p in status.message.parts if p.HasField("data")]
            seen.append(["status", TaskState.Name(status.state), data])
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            text = "".join(p.text for p in update.artifact.parts)
            seen.append(["artifact", text, update.last_chunk, update.append])
    return seen


async def main():
    seen = {}
    async with httpx.AsyncClient(timeout=60, headers=AUTH) as http, httpx.AsyncClient(timeout=60) as anonymous:
        public = await A2ACardResolver(anonymous, BASE).get_agent_card()
        seen["public_card"] = {
            "skills": [s.id for s in public.skills],
            "schemes": list(public.security_schemes.keys()),
            "url": public.supported_interfaces[0].url,
        }
        own = await A2ACardResolver(http, BASE).get_agent_card()
        seen["card_skills"] = sorted(s.id for s in own.skills)

        blocking = await client("greeter", http, streaming=False)
        done = await last_task(blocking.send_message(SendMessageRequest(message=message("hi"))))
        seen["send"] = {"state": state(done), "answer": answer_of(done), "id": done.id, "context": done.context_id}

        # The same context continues the conversation.
        again = await last_task(
            blocking.send_message(SendMessageRequest(message=message("hi again", context_id=done.context_id)))
        )
        seen["same_context"] = again.context_id == done.context_id

        streaming = await client("greeter", http, streaming=True)
        seen["stream"] = await collect(streaming.send_message(SendMessageRequest(message=message("hello"))))

        got = await blocking.get_task(GetTaskRequest(id=done.id))
        seen["get"] = {"state": state(got), "answer": answer_of(got), "history": len(got.history)}

        listed = await blocking.list_tasks(ListTasksRequest(context_id=done.context_id, page_size=10))
        seen["list_context"] = sorted(t.id for t in listed.tasks) == sorted([done.id, again.id])
        everything = await blocking.list_tasks(ListTasksRequest(page_size=50))
        seen["list_all"] = len(everything.tasks)

        slow = await client("sleeper", http, streaming=False)
        queued = await last_task(
            slow.send_message(
                SendMessageRequest(
                    message=message("slow please"),
                    configuration=SendMessageConfiguration(return_immediately=True),
                )
            )
        )
        seen["immediate"] = state(queued)
        cancelled = await slow.cancel_task(CancelTaskRequest(id=queued.id))
        while state(cancelled) != "TASK_STATE_CANCELED":
            await asyncio.sleep(0.2)
            cancelled = await slow.get_task(GetTaskRequest(id=queued.id))
        seen["cancelled"] = state(cancelled)
        try:
            await slow.cancel_task(CancelTaskRequest(id=queued.id))
            seen["cancel_again"] = "no error"
        except Exception as e:  # noqa: BLE001 - the class is what is checked
            seen["cancel_again"] = type(e).__name__

        bank_stream = await client("bank", http, streaming=True)
        parked = await collect(bank_stream.send_message(SendMessageRequest(message=message("a big transfer"))))
        seen["parked"] = parked
        task_id = parked[0][2]
        seen["subscribed"] = await collect(bank_stream.subscribe(SubscribeToTaskRequest(id=task_id)))
        bank = await client("bank", http, streaming=False)
        approved = await last_task(bank.send_message(SendMessageRequest(message=message("approve", task_id=task_id))))
        seen["approved"] = {"state": state(approved), "answer": answer_of(approved)}

        try:
            await blocking.get_task(GetTaskRequest(id="no-such-task"))
            seen["unknown_task"] = "no error"
        except Exception as e:  # noqa: BLE001
            seen["unknown_task"] = type(e).__name__

    async with httpx.AsyncClient(timeout=60, headers={"Authorization": "Bearer sa_wrong"}) as wrong:
        try:
            config = ClientConfig(httpx_client=wrong, streaming=False)
            bad = await create_client(public, client_config=config)
            await last_task(bad.send_message(SendMessageRequest(message=message("hi"))))
            seen["wrong_key"] = "no error"
        except Exception as e:  # noqa: BLE001
            seen["wrong_key"] = f"{type(e).__name__}: {e}"
    print(json.dumps(seen))


asyncio.run(main())
