"""`RemoteGraph` from `langgraph` (ci/requirements-langgraph.txt) used as a node inside
a local graph, against the daemon: the local graph's state goes to the daemon's
assistant as a run, and what the run answers comes back into the local state. Prints
one JSON document for tests/langgraph.rs to check.

    remote_graph.py URL API_KEY ASSISTANT [subgraphs]

With `subgraphs`, the assistant's run (whose agent call runs another bundle) is
streamed with its subgraphs, by RemoteGraph alone and as a node: each update with the
namespace it came from.
"""

import asyncio
import json
import sys

from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.pregel.remote import RemoteGraph


def local_graph(remote):
    """A local graph: a node of its own, then the daemon's assistant."""
    builder = StateGraph(MessagesState)
    builder.add_node("note", lambda state: {"messages": []})
    builder.add_node("daemon", remote)
    builder.add_edge(START, "note")
    builder.add_edge("note", "daemon")
    builder.add_edge("daemon", END)
    return builder.compile()


def shown(state):
    return [{"type": m.type, "content": m.content} for m in state["messages"]]


async def subgraphs(remote):
    ask = {"messages": [{"role": "user", "content": "ask the helper"}]}
    graph = local_graph(remote)
    return {
        "direct": [
            [list(ns), sorted(update.keys())]
            async for ns, update in remote.astream(ask, stream_mode="updates", subgraphs=True)
        ],
        "inside": [
            [list(ns), sorted(update.keys())]
            async for ns, update in graph.astream(ask, stream_mode="updates", subgraphs=True)
        ],
    }


async def main():
    url, api_key, assistant, *mode = sys.argv[1:]
    remote = RemoteGraph(assistant, url=url, api_key=api_key)
    if mode == ["subgraphs"]:
        print(json.dumps(await subgraphs(remote)))
        return
    graph = local_graph(remote)
    ask = {"messages": [{"role": "user", "content": "2+3"}]}
    stateless = graph.invoke(ask)
    on_thread = await graph.ainvoke(ask, config={"configurable": {"thread_id": "remote-1"}})
    streamed = [
        sorted(update.keys())
        async for update in graph.astream(ask, stream_mode="updates")
    ]
    print(json.dumps({
        "stateless": shown(stateless),
        "on_thread": shown(on_thread),
        "streamed": streamed,
        "direct": remote.invoke(ask)["messages"][-1]["content"],
    }))


asyncio.run(main())
