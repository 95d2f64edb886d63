"""Durable agent runs on DBOS, the peer of `cargo bench --bench peers`.

Each run is a DBOS workflow of three checkpointed steps, the agent the
daemon's bench bundle runs: a model call that answers with a tool call, the
tool (adds two numbers, in process), and a model call that answers. Model
calls go to the same mock server as the daemon's, over HTTP, and DBOS keeps
its state in PostgreSQL (`--database-url`). Prints one JSON line:
{"runs": N, "seconds": S, "runs_per_second": R}.
"""

import argparse
import asyncio
import json
import time

import httpx
from dbos import DBOS, DBOSConfig

client: httpx.AsyncClient
model_url: str


@DBOS.step()
async def model_call(messages: list) -> dict:
    response = await client.post(model_url, json={"model": "m", "messages": messages})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]


@DBOS.step()
async def add(a: float, b: float) -> dict:
    return {"result": a + b}


@DBOS.workflow()
async def agent(text: str) -> str:
    messages = [{"role": "user", "content": text}]
    reply = await model_call(messages)
    call = reply["tool_calls"][0]
    arguments = json.loads(call["function"]["arguments"])
    output = await add(arguments["a"], arguments["b"])
    messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(output)}]
    answer = await model_call(messages)
    return answer.get("content") or ""


async def run_all(runs: int, concurrency: int, label: str) -> float:
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limit:
            handle = await DBOS.start_workflow_async(agent, f"{label} {i}")
            await handle.get_result()

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(runs)))
    return time.monotonic() - started


async def main() -> None:
    global client, model_url
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    model_url = args.model_url
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    client = httpx.AsyncClient(limits=limits, timeout=30.0)
    config: DBOSConfig = {"name": "sa-bench-peers", "system_database_url": args.database_url}
    DBOS(config=config)
    DBOS.launch()
    await run_all(min(100, args.runs), args.concurrency, "warm")
    seconds = await run_all(args.runs, args.concurrency, "run")
    print(json.dumps({"runs": args.runs, "seconds": seconds, "runs_per_second": args.runs / seconds}))
    await client.aclose()
    DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main())
