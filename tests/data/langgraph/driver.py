"""LangGraph's Python SDK (langgraph-sdk, ci/requirements-langgraph.txt) against the
daemon: one scenario per subcommand, what the SDK returned printed as one JSON
document on stdout, for tests/langgraph.rs to check.

    driver.py URL API_KEY SCENARIO [ARGS...]
"""

import asyncio
import json
import sys

import httpx

from langgraph_sdk import get_client
from langgraph_sdk.errors import APIError


async def status_of(call):
    """The HTTP status a call ended with (200 when it answered); `wait` raises
    httpx's own error rather than the SDK's."""
    try:
        await call
        return 200
    except (APIError, httpx.HTTPStatusError) as error:
        return error.response.status_code


async def assistants(client, hidden):
    """Every assistant call the SDK makes; `hidden` is a bundle the key may not read."""
    everything = await client.assistants.search(limit=100)
    first = everything[0]
    paged = await client.assistants.search(limit=1, offset=0, response_format="object")
    by_name = await client.assistants.get(first["graph_id"])
    by_id = await client.assistants.get(first["assistant_id"])
    return {
        "search": everything,
        "search_graph_id": await client.assistants.search(graph_id="calc"),
        "search_name": await client.assistants.search(name="CAL"),
        "search_metadata": await client.assistants.search(
            metadata={"bundle_version": "2"}
        ),
        "search_select": await client.assistants.search(select=["assistant_id", "name"]),
        "search_sorted": await client.assistants.search(sort_by="name", sort_order="asc"),
        "page": {"assistants": paged["assistants"], "next": paged["next"]},
        "page_two": await client.assistants.search(limit=1, offset=1),
        "count": await client.assistants.count(),
        "count_graph_id": await client.assistants.count(graph_id="calc"),
        "get_by_name": by_name,
        "get_by_id": by_id,
        "schemas": await client.assistants.get_schemas("calc"),
        "graph": await client.assistants.get_graph("calc"),
        "graph_xray": await client.assistants.get_graph("calc", xray=True),
        "graph_plain": await client.assistants.get_graph("plain"),
        "subgraphs": await client.assistants.get_subgraphs("calc"),
        "versions": await client.assistants.get_versions("calc"),
        "hidden_get": await status_of(client.assistants.get(hidden)),
        "hidden_search": await client.assistants.search(graph_id=hidden),
        "unknown_get": await status_of(client.assistants.get("no-such-bundle")),
    }


async def threads(client, other_thread):
    """Every thread call the SDK makes but runs; `other_thread` is another key's."""
    threads = client.threads
    made = await threads.create(thread_id="t-one", metadata={"team": "a", "n": 1})
    fresh = await threads.create()
    result = {
        "made": made,
        "again": await threads.create(thread_id="t-one", if_exists="do_nothing"),
        "raised": await status_of(threads.create(thread_id="t-one")),
        "fresh": fresh,
        "bad_id": await status_of(threads.create(thread_id="bad id")),
        "supersteps": await status_of(
            threads.create(supersteps=[{"updates": [{"values": {}, "as_node": "x"}]}])
        ),
        "patched": await threads.update("t-one", metadata={"n": 2, "team": None}),
        "got": await threads.get("t-one"),
        "chat": await threads.get("chat-1"),
        "parked": await threads.get("parked"),
        "search_all": await threads.search(limit=100),
        "search_metadata": await threads.search(metadata={"n": 2}),
        "search_status": await threads.search(status="interrupted"),
        "search_ids": await threads.search(
            ids=["chat-1", "t-one"], sort_by="thread_id", sort_order="asc"
        ),
        "search_select": await threads.search(select=["thread_id", "status"]),
        "page": await threads.search(limit=1, offset=1, sort_by="thread_id", sort_order="asc"),
        "count": await threads.count(),
        "count_idle": await threads.count(status="idle"),
        "other_get": await status_of(threads.get(other_thread)),
        "values_search": await status_of(threads.search(values={"x": 1})),
        "delete_parked": await status_of(threads.delete("parked")),
        "delete_unknown": await status_of(threads.delete("no-such-thread")),
    }
    await threads.delete(fresh["thread_id"])
    result["deleted_get"] = await status_of(threads.get(fresh["thread_id"]))

    # Its state and history: one checkpoint per durable step.
    history = await threads.get_history("chat-1", limit=100)
    ids = [state["checkpoint"]["checkpoint_id"] for state in history]
    result["state"] = await threads.get_state("chat-1")
    result["history"] = history
    result["history_before"] = await threads.get_history("chat-1", before=ids[1])
    result["history_limit"] = await threads.get_history("chat-1", limit=1)
    result["history_metadata"] = await threads.get_history(
        "chat-1", metadata={"source": "input"}
    )
    result["state_by_id"] = await threads.get_state("chat-1", checkpoint_id=ids[2])
    result["state_by_checkpoint"] = await threads.get_state(
        "chat-1",
        checkpoint={"thread_id": "chat-1", "checkpoint_ns": "", "checkpoint_id": ids[2]},
    )
    result["empty_state"] = await threads.get_state("t-one")
    result["unknown_checkpoint"] = await status_of(
        threads.get_state("chat-1", checkpoint_id="nope")
    )
    result["update_state"] = await status_of(
        threads.update_state("chat-1", {"messages": []})
    )
    result["other_state"] = await status_of(threads.get_state(other_thread))
    return result


async def runs(client):
    """Every run call the SDK makes but streams, on threads and stateless."""
    runs = client.runs
    ask = {"messages": [{"role": "user", "content": "2+3"}]}
    thread = (await client.threads.create())["thread_id"]
    seen = []
    created = await runs.create(
        thread, "adder", input=ask, metadata={"from": "sdk"}, on_run_created=seen.append
    )
    run_id = created["run_id"]
    result = {
        "thread": thread,
        "created": created,
        "seen": seen,
        "joined": await runs.join(thread, run_id),
        "got": await runs.get(thread, run_id),
    }
    result["waited"] = await runs.wait(
        thread,
        "adder",
        input={"messages": [{"type": "human", "content": "again"}]},
        config={"configurable": {"lang": "en", "thread_id": "ignored"}},
    )
    result["listed"] = await runs.list(thread)
    result["listed_success"] = await runs.list(thread, status="success", limit=1)
    result["stateless"] = await runs.wait(
        None, "adder", input={"messages": [{"role": "user", "content": "hello"}]}
    )
    result["command"] = await status_of(
        runs.create(thread, "adder", command={"resume": True})
    )
    result["no_input"] = await status_of(runs.create(thread, "adder", input=None))
    result["unknown_assistant"] = await status_of(runs.create(thread, "nope", input=ask))
    result["no_thread"] = await status_of(runs.create("missing-thread", "adder", input=ask))
    hello = {"messages": [{"role": "user", "content": "hello"}]}
    batch = await runs.create_batch([
        {"assistant_id": "adder", "input": hello, "on_completion": "keep", "metadata": {"n": 1}},
        {"assistant_id": "adder", "input": hello, "metadata": {"n": 2}},
    ])
    result["batch"] = batch
    result["batch_bad"] = await status_of(
        runs.create_batch([{"assistant_id": "adder", "input": hello}, {"assistant_id": "nope", "input": hello}])
    )
    result["batch_bad_body"] = await status_of(runs.create_batch([]))
    made = await runs.create("made-by-run", "adder", input=ask, if_not_exists="create")
    result["made_by_run"] = await runs.join("made-by-run", made["run_id"])

    # A slow run keeps its thread busy: another is refused; cancelled, it
    # reads interrupted; deleted, it is gone.
    slow_thread = (await client.threads.create())["thread_id"]
    slow = await runs.create(
        slow_thread, "adder", input={"messages": [{"role": "user", "content": "slow"}]}
    )
    result["busy"] = await status_of(runs.create(slow_thread, "adder", input=ask))
    result["cancelled_values"] = await runs.cancel(slow_thread, slow["run_id"], wait=True)
    result["cancelled"] = await runs.get(slow_thread, slow["run_id"])
    await runs.delete(slow_thread, slow["run_id"])
    result["deleted"] = await status_of(runs.get(slow_thread, slow["run_id"]))
    result["other_thread_run"] = await status_of(runs.get(slow_thread, run_id))

    # Double texting: `enqueue` waits for the thread's runs before it, each
    # starting from what the one before left; `interrupt` and `rollback`
    # stop the thread's run first.
    queueing = (await client.threads.create())["thread_id"]
    ahead = await runs.create(
        queueing, "adder", input={"messages": [{"role": "user", "content": "slowly"}]}
    )
    queued = [
        await runs.create(queueing, "adder", input=hello, multitask_strategy="enqueue")
        for _ in range(2)
    ]
    result["enqueue_timed"] = await status_of(
        runs.create(queueing, "adder", input=hello, multitask_strategy="enqueue", after_seconds=5)
    )
    result["enqueued"] = [
        (await runs.get(queueing, run["run_id"]))["status"] for run in queued
    ]
    result["queueing_status"] = (await client.threads.get(queueing))["status"]
    await runs.cancel(queueing, ahead["run_id"])
    result["after_queue"] = await runs.join(queueing, queued[-1]["run_id"])
    result["queue_runs"] = [run["run_id"] for run in [ahead, *queued]]
    result["queue_statuses"] = [
        (await runs.get(queueing, run["run_id"]))["status"] for run in [ahead, *queued]
    ]
    texting = (await client.threads.create())["thread_id"]
    first = await runs.create(texting, "adder", input={"messages": [{"role": "user", "content": "slow"}]})
    result["bad_interrupt"] = await status_of(
        runs.create(texting, "adder", input=None, multitask_strategy="interrupt")
    )
    result["still_running"] = (await runs.get(texting, first["run_id"]))["status"]
    second = await runs.create(texting, "adder", input=hello, multitask_strategy="interrupt")
    result["interrupting"] = second
    result["after_interrupt"] = await runs.join(texting, second["run_id"])
    result["interrupted"] = await runs.get(texting, first["run_id"])
    third = await runs.create(
        texting, "adder", input={"messages": [{"role": "user", "content": "slowly"}]}
    )
    result["after_rollback"] = await runs.wait(
        texting, "adder", input=hello, multitask_strategy="rollback"
    )
    result["rolled_back"] = await status_of(runs.get(texting, third["run_id"]))
    result["texting_runs"] = [run["status"] for run in await runs.list(texting)]
    return result


async def collect(parts):
    """A stream's parts as [event, data, id] lists."""
    return [[part.event, part.data, part.id] async for part in parts]


MODES = [
    "values", "updates", "messages-tuple", "messages", "events",
    "custom", "debug", "checkpoints", "tasks",
]


async def stream(client):
    """Streamed runs in every mode, joined again after an event and whole."""
    runs = client.runs
    ask = {"messages": [{"role": "user", "content": "2+3"}]}
    thread = (await client.threads.create())["thread_id"]
    seen = []
    parts = await collect(
        runs.stream(thread, "adder", input=ask, stream_mode=MODES, on_run_created=seen.append)
    )
    run_id = seen[0]["run_id"]
    numbered = [part for part in parts if part[2] is not None]
    middle = numbered[len(numbered) // 2][2]
    return {
        "thread": thread,
        "run_id": run_id,
        "parts": parts,
        "middle": middle,
        "rest": await collect(
            runs.join_stream(thread, run_id, last_event_id=middle, stream_mode=MODES)
        ),
        "again": await collect(runs.join_stream(thread, run_id)),
        "state": await client.threads.get_state(thread),
        "plain": await collect(
            runs.stream(thread, "adder", input={"messages": [{"role": "user", "content": "again"}]})
        ),
        "stateless": await collect(
            runs.stream(
                None, "adder", input={"messages": [{"role": "user", "content": "hello"}]},
                stream_mode="updates",
            )
        ),
        "bad_mode": await status_of(
            collect(runs.stream(thread, "adder", input=ask, stream_mode="tools"))
        ),
    }


async def subgraphs(client):
    """A run whose agent call runs another bundle, streamed with its
    subgraphs, joined again after an event (its subgraphs as its stream had
    them), and a run streamed without them."""
    runs = client.runs
    ask = {"messages": [{"role": "user", "content": "ask the helper"}]}
    modes = ["values", "updates", "messages-tuple", "custom"]
    thread = (await client.threads.create())["thread_id"]
    seen = []
    parts = await collect(
        runs.stream(
            thread, "boss", input=ask, stream_subgraphs=True, on_run_created=seen.append,
            stream_mode=modes,
        )
    )
    run_id = seen[0]["run_id"]
    nested = [part for part in parts if "|" in part[0] and part[2] is not None]
    middle = nested[len(nested) // 2][2]
    return {
        "run_id": run_id,
        "parts": parts,
        "middle": middle,
        "rest": await collect(
            runs.join_stream(thread, run_id, last_event_id=middle, stream_mode=modes)
        ),
        "state": await client.threads.get_state(thread),
        "without": await collect(
            runs.stream(None, "boss", input=ask, stream_mode=["values", "updates"])
        ),
        "bad": await status_of(
            collect(runs.stream(None, "boss", input=ask, stream_subgraphs="yes"))
        ),
    }


async def interrupt(client):
    """A run parked for a person: its interrupt in the stream, the state and
    the thread; resumed with Command(resume=...) by edit, and by reject."""
    runs = client.runs
    thread = (await client.threads.create())["thread_id"]
    ask = {"messages": [{"role": "user", "content": "pay 5"}]}
    parked = await collect(
        runs.stream(thread, "payer", input=ask, stream_mode=["values", "updates"])
    )
    state = await client.threads.get_state(thread)
    result = {
        "parked": parked,
        "state": state,
        "thread": await client.threads.get(thread),
        "stale": await status_of(
            runs.wait(thread, "payer", command={"resume": {"j/sha256:0/c": {"type": "approve"}}})
        ),
        "no_resume": await status_of(runs.wait(thread, "payer", command={"goto": "tools"})),
    }
    edit = {"type": "edit", "edited_action": {"name": "pay", "args": {"amount": 7}}}
    result["resumed"] = await collect(
        runs.stream(
            thread, "payer", command={"resume": {state["interrupts"][0]["id"]: edit}},
            stream_mode="updates",
        )
    )
    result["after"] = await client.threads.get_state(thread)
    result["nothing_parked"] = await status_of(
        runs.wait(thread, "payer", command={"resume": True})
    )
    other = (await client.threads.create())["thread_id"]
    await runs.wait(other, "payer", input={"messages": [{"role": "user", "content": "pay 9"}]})
    result["denied"] = await runs.wait(
        other, "payer",
        command={"resume": {"decisions": [{"type": "reject", "message": "too much"}]}},
    )
    return result


async def long_wait(client, thread):
    """A run waited for longer than the daemon's heartbeat: its answer
    comes after keep-alive newlines."""
    ask = {"messages": [{"role": "user", "content": "gate"}]}
    return await client.runs.wait(thread, "waiter", input=ask)


async def rejoin(client, thread):
    """One streamed run on `thread`, each part printed as it comes (the test
    restarts the daemon meanwhile: the SDK joins the run again)."""
    ask = {"messages": [{"role": "user", "content": "gate"}]}
    async for part in client.runs.stream(
        thread, "waiter", input=ask, stream_mode=["values", "updates"]
    ):
        print(json.dumps([part.event, part.data, part.id]), flush=True)
    print(json.dumps(["done", None, None]), flush=True)


async def store(client):
    """Every store call the SDK makes, on the key's own store."""
    s = client.store
    await s.put_item(
        ["docs", "team"], key="a", value={"title": "Durable agents", "year": 2026},
        index=["title"],
    )
    await s.put_item(["docs", "team"], key="b", value={"title": "Rust notes", "year": 2024})
    await s.put_item(
        ["docs", "other"], key="c", value={"title": "Durable too", "year": 2020}, index=False
    )
    await s.put_item(["memories"], key="m", value={"text": "likes tea"}, ttl=60)
    result = {
        "get": await s.get_item(["docs", "team"], key="a"),
        "get_unrefreshed": await s.get_item(["memories"], key="m", refresh_ttl=False),
        "missing": await status_of(s.get_item(["docs", "team"], key="zzz")),
        "search_all": await s.search_items(["docs"]),
        "search_everything": await s.search_items([], limit=100),
        "search_filter": await s.search_items(["docs"], filter={"year": {"$gte": 2024}}),
        "search_eq": await s.search_items(["docs"], filter={"title": "Rust notes"}),
        "search_query": await s.search_items(["docs"], query="durable agents"),
        "search_page": await s.search_items(["docs"], limit=1, offset=1),
        "bad_filter": await status_of(
            s.search_items(["docs"], filter={"year": {"$in": [2024]}})
        ),
        "bad_label": await status_of(s.put_item(["docs", ""], key="x", value={})),
        "too_big": await status_of(s.put_item(["docs"], key="big", value={"text": "x" * 70000})),
        "namespaces": await s.list_namespaces(),
        "namespaces_prefix": await s.list_namespaces(prefix=["docs"]),
        "namespaces_depth": await s.list_namespaces(max_depth=1),
        "namespaces_suffix": await s.list_namespaces(suffix=["team"]),
        "namespaces_wildcard": await s.list_namespaces(prefix=["*", "other"]),
    }
    await s.delete_item(["docs", "team"], key="b")
    result["deleted"] = await status_of(s.get_item(["docs", "team"], key="b"))
    result["deleted_again"] = await status_of(s.delete_item(["docs", "team"], key="b"))
    return result


async def store_peek(client):
    """What a key sees of the store `store` filled (another key's)."""
    s = client.store
    return {
        "get": await status_of(s.get_item(["docs", "team"], key="a")),
        "search": await s.search_items([], limit=100),
        "namespaces": await s.list_namespaces(),
        "put": await status_of(s.put_item(["mine"], key="k", value={"n": 1})),
    }


async def crons(client):
    """Every cron call the SDK makes: a thread's cron runs on the thread (its
    schedule every second) until deleted; a cron alone, paused, is changed."""
    from datetime import datetime, timezone

    thread = (await client.threads.create())["thread_id"]
    ask = {"messages": [{"role": "user", "content": "hello", "id": "the-cron-ask"}]}
    on_thread = await client.crons.create_for_thread(
        thread, "adder", schedule="* * * * * *", input=ask, metadata={"team": "a"},
        multitask_strategy="enqueue",
    )
    alone = await client.crons.create(
        "adder", schedule="0 9 * * MON", input=ask, timezone="Europe/Berlin",
        end_time=datetime(2030, 1, 1, tzinfo=timezone.utc), enabled=False,
        metadata={"team": "b"},
    )
    runs = []
    for _ in range(600):
        runs = await client.runs.list(thread)
        if any(run["status"] == "success" for run in runs):
            break
        await asyncio.sleep(0.1)
    await client.crons.delete(on_thread["cron_id"])
    result = {
        "on_thread": on_thread,
        "alone": alone,
        "runs": runs,
        "state": await client.threads.get_state(thread),
        "search": await client.crons.search(),
        "search_enabled": await client.crons.search(enabled=False),
        "search_metadata": await client.crons.search(metadata={"team": "b"}),
        "search_select": await client.crons.search(select=["cron_id", "schedule"]),
        "count": await client.crons.count(),
        "count_assistant": await client.crons.count(assistant_id="adder"),
        "updated": await client.crons.update(
            alone["cron_id"], schedule="30 10 * * *", enabled=True, end_time=None,
            metadata={"team": "c"},
        ),
        "bad_schedule": await status_of(
            client.crons.create("adder", schedule="not a cron", input=ask)
        ),
        "bad_zone": await status_of(
            client.crons.create("adder", schedule="* * * * *", input=ask, timezone="Mars/Base")
        ),
        "unknown_thread": await status_of(
            client.crons.create_for_thread("no-such", "adder", schedule="* * * * *", input=ask)
        ),
        "unknown_assistant": await status_of(
            client.crons.create("nope", schedule="* * * * *", input=ask)
        ),
        "delete_gone": await status_of(client.crons.delete(on_thread["cron_id"])),
    }
    await client.crons.delete(alone["cron_id"])
    result["after"] = await client.crons.count()
    return result


async def cron_alone(client):
    """A cron made by a key that may not manage schedules: it cannot delete it."""
    ask = {"messages": [{"role": "user", "content": "hello"}]}
    made = await client.crons.create("adder", schedule="0 9 * * *", input=ask)
    return {"cron_id": made["cron_id"], "delete": await status_of(client.crons.delete(made["cron_id"]))}


async def prune(client):
    """Threads pruned: the key's idle ones go, a busy one and unknown ids stay."""
    threads = client.threads
    one = (await threads.create())["thread_id"]
    two = (await threads.create())["thread_id"]
    return {
        "pruned": await threads.prune([one, two, "no-such-thread"]),
        "one": await status_of(threads.get(one)),
        "again": await threads.prune([one]),
        "keep_latest": await status_of(threads.prune([two], strategy="keep_latest")),
    }


async def copy(client):
    """A thread copied: a new thread with its metadata and what its ended runs left."""
    threads, runs = client.threads, client.runs
    thread = (await threads.create(metadata={"team": "a"}))["thread_id"]
    await runs.wait(thread, "adder", input={"messages": [{"role": "user", "content": "2+3"}]})
    await runs.wait(thread, "adder", input={"messages": [{"role": "user", "content": "hello"}]})
    copied = await threads.copy(thread)
    copy_id = copied["thread_id"]
    return {
        "thread": thread,
        "copied": copied,
        "state": await threads.get_state(thread),
        "copy_state": await threads.get_state(copy_id),
        "history": len(await threads.get_history(thread, limit=100)),
        "copy_history": len(await threads.get_history(copy_id, limit=100)),
        "copy_runs": [run["status"] for run in await runs.list(copy_id)],
        "after_copy": await runs.wait(
            copy_id, "adder", input={"messages": [{"role": "user", "content": "again"}]}
        ),
        "thread_after": await threads.get_state(thread),
        "missing": await status_of(threads.copy("no-such-thread")),
    }


async def custom(client, hidden):
    """Custom assistants: made over bundle `plain` with its variable `lang`, run, changed in
    versions, the latest picked back, deleted; `hidden` is a bundle the key may not read."""
    assistants = client.assistants
    made = await assistants.create(
        "plain",
        config={"configurable": {"lang": "French"}},
        metadata={"team": "a"},
        name="french",
    )
    aid = made["assistant_id"]
    hello = {"messages": [{"role": "user", "content": "hello"}]}
    thread = (await client.threads.create())["thread_id"]
    french = await client.runs.wait(thread, aid, input=hello)
    # A run's own variables win over its assistant's.
    italian = await client.runs.wait(None, aid, input=hello, context={"lang": "Italian"})
    runs = await client.runs.list(thread)
    updated = await assistants.update(aid, context={"lang": "German"}, metadata={"stage": "b"})
    german = await client.runs.wait(None, aid, input=hello)
    versions = await assistants.get_versions(aid)
    picked = await assistants.set_latest(aid, 1)
    french_again = await client.runs.wait(None, aid, input=hello)
    result = {
        "made": made,
        "again": await assistants.create("plain", assistant_id=aid, if_exists="do_nothing"),
        "taken": await status_of(assistants.create("plain", assistant_id=aid)),
        "bundle_id": await status_of(assistants.create("plain", assistant_id="plain")),
        "unread": await status_of(assistants.create("plain", context={"colour": "red"})),
        "hidden_graph": await status_of(assistants.create(hidden)),
        "french": french,
        "italian": italian,
        "run": runs[0],
        "updated": updated,
        "german": german,
        "versions": versions,
        "picked": picked,
        "french_again": french_again,
        "got": await assistants.get(aid),
        "search": await assistants.search(metadata={"team": "a"}),
        "count": await assistants.count(graph_id="plain"),
        "schemas": await assistants.get_schemas(aid),
        "graph": await assistants.get_graph(aid),
        "bundle_update": await status_of(assistants.update("plain", name="x")),
        "bundle_delete": await status_of(assistants.delete("plain")),
        "missing_version": await status_of(assistants.set_latest(aid, 9)),
    }
    await assistants.delete(aid)
    result["gone"] = await status_of(assistants.get(aid))
    result["kept"] = await assistants.create("plain", name="kept")
    return result


async def main():
    url, api_key, scenario, *args = sys.argv[1:]
    client = get_client(url=url, api_key=api_key)
    if scenario == "rejoin":
        await rejoin(client, *args)
        return
    scenarios = {
        "assistants": assistants, "threads": threads, "runs": runs, "stream": stream,
        "subgraphs": subgraphs,
        "interrupt": interrupt, "long_wait": long_wait, "store": store,
        "store_peek": store_peek, "crons": crons,
        "cron_alone": cron_alone, "prune": prune, "copy": copy, "custom": custom,
    }
    result = await scenarios[scenario](client, *args)
    print(json.dumps(result, default=str))


asyncio.run(main())
