"""LangGraph's Python SDK (langgraph-sdk, ci/requirements-langgraph.txt) against the
daemon: one scenario per subcommand, what the SDK returned printed as one JSON
document on stdout, for tests/langgraph.rs to check.

    driver.py URL API_KEY SCENARIO [ARGS...]
"""

import asyncio
import json
import sys

from langgraph_sdk import get_client
from langgraph_sdk.errors import APIError


async def status_of(call):
    """The HTTP status a call ended with (200 when it answered)."""
    try:
        await call
        return 200
    except APIError as error:
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


async def main():
    url, api_key, scenario, *args = sys.argv[1:]
    client = get_client(url=url, api_key=api_key)
    scenarios = {"assistants": assistants}
    result = await scenarios[scenario](client, *args)
    print(json.dumps(result, default=str))


asyncio.run(main())
