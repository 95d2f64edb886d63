"""A2A push notifications set with the Python SDK (a2a-sdk), for tests/a2a.rs.

Usage: push.py BASE_URL TOKEN HOOK_URL. Sends the bank a big transfer with
a push config in the message's configuration (id "send", token "tok-send",
to HOOK_URL/send), returning at once (the model is slow to ask for the
transfer); adds a second config to the task
(id "extra", token "tok-extra", to HOOK_URL/extra) and reads both back;
once the task is INPUT_REQUIRED deletes the second one, approves, and waits
for the task to complete. Prints one JSON object with what it saw.
"""

import asyncio
import json
import sys
import uuid

import httpx

from a2a.client import ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)

BASE, TOKEN, HOOK = sys.argv[1], sys.argv[2], sys.argv[3]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def message(text, task_id=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        m.task_id = task_id
    return m


def state(task):
    return TaskState.Name(task.status.state)


async def first_task(stream):
    async for event in stream:
        return event.task


async def wait_for(bank, task_id, wanted):
    for _ in range(300):
        task = await bank.get_task(GetTaskRequest(id=task_id))
        if state(task) == wanted:
            return task
        await asyncio.sleep(0.1)
    raise SystemExit(f"task {task_id} never reached {wanted}: {state(task)}")


async def main():
    seen = {}
    async with httpx.AsyncClient(timeout=60, headers=AUTH) as http:
        config = ClientConfig(httpx_client=http, streaming=False)
        bank = await create_client(f"{BASE}/a2a/bank", client_config=config, resolver_http_kwargs={"headers": AUTH})
        push = TaskPushNotificationConfig(
            id="send",
            url=f"{HOOK}/send",
            token="tok-send",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="hook-secret"),
        )
        task = await first_task(
            bank.send_message(
                SendMessageRequest(
                    message=message("a big push transfer"),
                    configuration=SendMessageConfiguration(
                        return_immediately=True, task_push_notification_config=push
                    ),
                )
            )
        )
        seen["task"] = task.id
        extra = await bank.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="extra", url=f"{HOOK}/extra", token="tok-extra")
        )
        seen["created"] = {"id": extra.id, "task": extra.task_id, "url": extra.url}
        got = await bank.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="send")
        )
        seen["got"] = {"token": got.token, "scheme": got.authentication.scheme}
        listed = await bank.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
        seen["listed"] = sorted(c.id for c in listed.configs)

        # Read after the config was stored: a task not parked yet parks
        # with the config in place, so "extra" must hear of it.
        now = await bank.get_task(GetTaskRequest(id=task.id))
        seen["parked_before_extra"] = state(now) == "TASK_STATE_INPUT_REQUIRED"
        await wait_for(bank, task.id, "TASK_STATE_INPUT_REQUIRED")
        # The receiver has the INPUT_REQUIRED push for "extra" before it goes.
        for _ in range(300 if not seen["parked_before_extra"] else 0):
            pushed = (await http.get(f"{HOOK}/extra")).json()
            if "TASK_STATE_INPUT_REQUIRED" in pushed:
                break
            await asyncio.sleep(0.1)
        else:
            if not seen["parked_before_extra"]:
                raise SystemExit(f"no INPUT_REQUIRED push reached {HOOK}/extra: {pushed}")
        await bank.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="extra")
        )
        # Deleting again is no error (the operation is idempotent).
        await bank.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="extra")
        )
        left = await bank.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
        seen["left"] = [c.id for c in left.configs]
        await first_task(bank.send_message(SendMessageRequest(message=message("approve", task_id=task.id))))
        done = await wait_for(bank, task.id, "TASK_STATE_COMPLETED")
        seen["done"] = state(done)
    print(json.dumps(seen))


asyncio.run(main())
