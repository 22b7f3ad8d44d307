"""One client's load run for `bench/client.py`, in that client's own venv:

    python bench/client_load.py ors|openreward URL episodes|calls CONCURRENCY SECONDS

`episodes`: CONCURRENCY workers, each playing whole math episodes back to back (open a session, read the
prompt, submit, close). `calls`: CONCURRENCY sessions on `counter`, each calling `tick` back to back. Prints one
JSON line: what was done in the measured window, its wall time and this process's CPU time in it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
WARM_UP_LIMIT = 120.0
"""Seconds the warm-up may take at most."""


async def ors(url: str, workload: str, concurrency: int, seconds: float) -> dict:
    from ors_client import AsyncClient

    async with AsyncClient(url, max_concurrency=concurrency) as c:
        env = "math" if workload == "episodes" else "counter"
        task = (await c.tasks(env))[0]

        if workload == "episodes":

            async def unit() -> int:
                async with c.session("math", task=task) as s:
                    await s.prompt()
                    out = await s.call("submit", {"answer": task["answer"]})
                    assert out.reward == 1.0, out
                return 1

            return await measure(unit, concurrency, seconds)
        sessions = [c.session("counter", task=task) for _ in range(concurrency)]
        await asyncio.gather(*(s.open() for s in sessions))
        free = list(sessions)

        async def tick() -> int:
            s = free.pop()
            try:
                await s.call("tick")
            finally:
                free.append(s)
            return 1

        try:
            return await measure(tick, concurrency, seconds)
        finally:
            await asyncio.gather(*(s.close() for s in sessions))


async def openreward(url: str, workload: str, concurrency: int, seconds: float) -> dict:
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(api_key="local")
    env_name = "math" if workload == "episodes" else "counter"
    env = client.environments.get(name=env_name, variant=env_name, base_url=url)
    task = (await env.list_tasks("train"))[0]
    try:
        if workload == "episodes":

            async def unit() -> int:
                async with env.session(task=task) as s:
                    await s.get_prompt()
                    out = await s.call_tool("submit", {"answer": task.task_spec["answer"]})
                    assert out.reward == 1.0, out
                return 1

            return await measure(unit, concurrency, seconds)
        sessions = [env.session(task=task) for _ in range(concurrency)]
        await asyncio.gather(*(s.__aenter__() for s in sessions))
        free = list(sessions)

        async def tick() -> int:
            s = free.pop()
            try:
                await s.call_tool("tick", {})
            finally:
                free.append(s)
            return 1

        try:
            return await measure(tick, concurrency, seconds)
        finally:
            await asyncio.gather(*(s.__aexit__(None, None, None) for s in sessions))
    finally:
        await client.environments.aclose()


async def measure(unit, concurrency: int, seconds: float) -> dict:
    """Closed loop: `concurrency` workers repeat `unit` until the window ends; the warm-up is not counted."""
    done = errors = finished = 0
    counting = False
    stop = False
    first_error = None

    warmed = asyncio.Event()

    async def worker() -> None:
        nonlocal done, errors, finished, first_error
        while not stop:
            try:
                await unit()
                done += counting
                finished += 1
            except Exception as exc:
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"
            if finished + errors >= concurrency:
                warmed.set()

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    # Warm up until every worker has finished one unit (at 512 sessions the first wave alone takes seconds).
    try:
        await asyncio.wait_for(warmed.wait(), WARM_UP_LIMIT)
    except TimeoutError:  # run with those that warmed up
        pass
    counting = True
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    counting = False
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stop = True
    await asyncio.gather(*workers)
    return {"done": done, "seconds": wall, "cpu": cpu, "errors": errors, "first_error": first_error}


def main() -> None:
    client, url, workload, concurrency, seconds = sys.argv[1:6]
    run = ors if client == "ors" else openreward
    result = asyncio.run(run(url, workload, int(concurrency), float(seconds)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
