"""`ors-client` checks, run in a venv holding only `ors-client`: `ors_client_checks.py CHECK URL [options]`.

Each check drives the client against the server at URL (ours or the reference, both serving the
`tests/clients/client_envs.py` environments) and reports what it saw as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from types import SimpleNamespace

import httpx
from _common import API_KEY, report
from ors_client import (
    AsyncClient,
    AuthError,
    Client,
    OrsError,
    SessionExpired,
    SessionNotFound,
    StreamCut,
    ToolError,
)
from ors_client.transport import LeanTransport

CHECKS = {}


def check(function):
    CHECKS[function.__name__] = function
    return function


def big_text(chars: int) -> str:  # as tests/clients/client_envs.py makes it
    return "".join(f"{i % 10}{' ' * (i % 7)}" for i in range(chars))[:chars]


class Counting(LeanTransport):
    """The default transport, counting the statuses it saw (to show the server was full, and said so) and the
    paths it asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: dict[int, int] = {}
        self.paths: dict[str, int] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        self.paths[request.url.path] = self.paths.get(request.url.path, 0) + 1
        return response


@check
async def discovery(url: str, args: argparse.Namespace) -> dict:
    async with AsyncClient(url, API_KEY) as c:
        try:
            await c.tools("nosuch")
            unknown = None
        except OrsError as exc:
            unknown = {"type": type(exc).__name__, "status": exc.status}
        return {
            "environments": await c.environments(),
            "tools": await c.tools("toolbox"),
            "splits": await c.splits("quiz"),
            "tasks": await c.tasks("quiz", split="train"),
            "num_tasks": await c.num_tasks("quiz", "train"),
            "task_2": await c.task("quiz", "train", 2),
            "unknown_env": unknown,
        }


@check
async def auth(url: str, args: argparse.Namespace) -> dict:
    """The server wants a key: without it every request is an AuthError; with it an episode runs."""
    seen = {}
    async with AsyncClient(url) as c:
        for name, attempt in {
            "environments": c.environments(),
            "session": c.session("quiz", split="train", index=0).open(),
        }.items():
            try:
                await attempt
                seen[name] = None
            except AuthError as exc:
                seen[name] = {"status": exc.status, "detail": exc.detail}
    async with AsyncClient(url, API_KEY) as c, c.session("quiz", split="train", index=0) as s:
        seen["with_key"] = (await s.call("submit", {"answer": "4"})).reward
    return seen


@check
async def math_async(url: str, args: argparse.Namespace) -> dict:
    labels = {"run": "r1", "odd": "a=b,c d"}
    async with AsyncClient(url, API_KEY) as c:
        tasks = await c.tasks("quiz", split="train")
        async with c.session("quiz", task=tasks[1], labels=labels) as s:
            prompt = await s.prompt()
            right = await s.call("submit", {"answer": tasks[1]["answer"]})
            again = await s.call("submit", {"answer": tasks[1]["answer"]})
            sid = s.id
            state = {"reward": s.reward, "steps": s.steps, "finished": s.finished, "labels": s.labels}
        try:
            await c.request("POST", "/ping", headers={"X-Session-ID": sid}, session=True)
            after = None
        except (SessionNotFound, SessionExpired) as exc:
            after = type(exc).__name__
        async with c.session("quiz", split="train", index=0) as s:
            wrong = await s.call("submit", {"answer": "5"})
    return {
        "prompt": prompt,
        "right": {"ok": right.ok, "reward": right.reward, "finished": right.finished, "text": right.text},
        "again": {"ok": again.ok, "reason": again.reason, "error": again.error},
        "state": state,
        "after_close": after,
        "wrong": {"reward": wrong.reward, "text": wrong.text},
    }


@check
async def own_ids(url: str, args: argparse.Namespace) -> dict:
    """Three episodes in a row: how many `/create_session` round trips the client made for them."""
    counting = Counting()
    async with AsyncClient(url, API_KEY, transport=counting) as c:
        rewards = []
        for _ in range(3):
            async with c.session("quiz", split="train", index=0) as s:
                rewards.append((await s.call("submit", {"answer": "5"})).reward)
    return {"create_session": counting.paths.get("/create_session", 0), "rewards": rewards}


@check
async def math_sync(url: str, args: argparse.Namespace) -> dict:
    with Client(url, API_KEY) as c:
        tasks = c.tasks("quiz")
        with c.session("quiz", task=tasks[2]) as s:
            prompt = s.prompt()
            out = s.call("submit", {"answer": tasks[2]["answer"]})
            messages = s.messages()
        group = c.group("quiz", task=tasks[0], n=3)
        rewards = []
        for i, member in enumerate(group):
            with member:
                rewards.append(member.call("submit", {"answer": str(4 + i)}).reward)
        results = c.rollouts("quiz", tasks, lambda s: s.call("submit", {"answer": s.task["answer"]}), n=2)
    return {
        "prompt": prompt,
        "out": {"reward": out.reward, "finished": out.finished, "text": out.text},
        "roles": [m["role"] for m in messages],
        "group_rewards": rewards,
        "rollouts": [{"reward": r.reward, "steps": r.steps, "error": r.error} for r in results],
    }


@check
async def multi_tool(url: str, args: argparse.Namespace) -> dict:
    async with AsyncClient(url, API_KEY) as c, c.session("toolbox", task={"expect": "x"}) as s:
        tools = sorted(t["name"] for t in await s.tools())
        added = await s.call("add", {"a": 2, "b": 40})
        notes = [await s.call("note", {"text": t}) for t in ("first", "second")]
        refused = {
            "unknown": await s.call("nosuch", {}),
            "bad_input": await s.call("add", {"a": "two"}),
        }
        try:
            await s.call("crash")
            crashed = None
        except ToolError as exc:
            crashed = exc.detail
        big = await s.call("big", {"chars": 10_000})
        finished = await s.call("finish")
        after = await s.call("add", {"a": 1, "b": 1})
        return {
            "tools": tools,
            "added": added.text,
            "notes": [n.text for n in notes],
            "refused": {k: {"ok": v.ok, "reason": v.reason, "error": v.error} for k, v in refused.items()},
            "crashed": crashed,
            "big_exact": big.text == big_text(10_000),
            "finished": {"text": finished.text, "reward": finished.reward, "finished": finished.finished},
            "after": {"ok": after.ok, "reason": after.reason},
            "session": {"reward": s.reward, "steps": s.steps, "finished": s.finished},
        }


@check
async def secrets(url: str, args: argparse.Namespace) -> dict:
    async with AsyncClient(url, API_KEY) as c:
        seen = {}
        for name, given in {"right": {"API_TOKEN": "s3cret"}, "wrong": {"API_TOKEN": "nope"}, "none": None}.items():
            async with c.session("toolbox", task={"expect": "s3cret"}, secrets=given) as s:
                seen[name] = (await s.call("check_secret")).text
        return seen


@check
async def group(url: str, args: argparse.Namespace) -> dict:
    async with AsyncClient(url, API_KEY) as c:
        task = (await c.tasks("quiz"))[3]
        members = await c.group("quiz", task=task, n=8)
        async with members:
            ids = {s.id for s in members}
            prompts = await asyncio.gather(*(s.prompt() for s in members))
            # GRPO-style: eight samples of one task, half of them right.
            answers = [task["answer"] if i % 2 == 0 else "0" for i in range(8)]
            calls = [s.call("submit", {"answer": a}) for s, a in zip(members, answers, strict=True)]
            outs = await asyncio.gather(*calls)
        first = members[0]
        async with first:  # each member is its own context manager too; closing twice is harmless
            pass
        try:
            await c.request("POST", "/ping", headers={"X-Session-ID": first.id}, session=True)
            after = None
        except (SessionNotFound, SessionExpired) as exc:
            after = type(exc).__name__
        return {
            "ids": len(ids),
            "prompts": [p[0]["text"] for p in prompts],
            "rewards": [o.reward for o in outs],
            "after_close": after,
        }


@check
async def crowd(url: str, args: argparse.Namespace) -> dict:
    """`--sessions` episodes at once with `--max-concurrency`; each holds its session through a slow call."""
    transport = Counting()
    live = peak = 0
    async with AsyncClient(url, API_KEY, max_concurrency=args.max_concurrency, transport=transport) as c:

        async def episode(i: int) -> float:
            nonlocal live, peak
            async with c.session("toolbox", task={"expect": "x"}) as s:
                live += 1
                peak = max(peak, live)
                await s.call("slow", {"seconds": 0.3})
                out = await s.call("add", {"a": i, "b": 1})
                live -= 1
                return int(out.text)

        started = time.monotonic()
        results = await asyncio.gather(*(episode(i) for i in range(args.sessions)))
        return {
            "results": results,
            "peak": peak,
            "statuses": transport.statuses,
            "seconds": time.monotonic() - started,
        }


@check
async def keepalive(url: str, args: argparse.Namespace) -> dict:
    """Two sessions idle for `--idle` s: one pinging (from the server's advertised timeout), one not."""
    async with AsyncClient(url, API_KEY) as c:
        kept = c.session("toolbox", task={"expect": "x"})
        dropped = c.session("toolbox", task={"expect": "x"}, keepalive=3600)
        async with kept, dropped:
            await asyncio.sleep(args.idle)  # the client's own pings are what this checks
            out = {"idle_timeout": kept.idle_timeout}
            out["kept"] = (await kept.call("add", {"a": 1, "b": 2})).text
            try:
                await dropped.call("add", {"a": 1, "b": 2})
                out["dropped"] = None
            except (SessionNotFound, SessionExpired) as exc:
                out["dropped"] = type(exc).__name__
        return out


@check
async def resume(url: str, args: argparse.Namespace) -> dict:
    """A slow call through a proxy that cuts its stream: resumed once (`--cut once`) or failing (`--cut always`)."""
    async with AsyncClient(url, API_KEY) as c, c.session("toolbox", task={"expect": "x"}) as s:
        try:
            out = await s.call("slow", {"seconds": args.seconds})
            result = {"text": out.text}
        except StreamCut as exc:
            result = {"error": type(exc).__name__, "detail": exc.detail}
        result["then"] = (await s.call("add", {"a": 1, "b": 1})).text
        return result


@check
async def openai(url: str, args: argparse.Namespace) -> dict:
    """A scripted 'model' plays toolbox through OpenAI-shaped tool calls (dicts and SDK-like objects)."""

    def sdk_call(call_id: str, name: str, arguments: str) -> SimpleNamespace:
        return SimpleNamespace(id=call_id, type="function", function=SimpleNamespace(name=name, arguments=arguments))

    script = [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 20, "b": 22}'}},
        sdk_call("c2", "note", json.dumps({"text": "the sum is 42"})),
        {"id": "c3", "type": "function", "function": {"name": "add", "arguments": "{not json"}},
        {"id": "c4", "type": "function", "function": {"name": "nosuch", "arguments": "{}"}},
        sdk_call("c5", "finish", ""),
    ]
    async with AsyncClient(url, API_KEY) as c, c.session("toolbox", task={"expect": "x"}) as s:
        tools = s.openai_tools()
        await s.prompt()
        replies = [await s.call_openai(call) for call in script]
        return {"tools": tools, "replies": replies, "messages": s.messages(), "reward": s.reward}


@check
async def rollouts(url: str, args: argparse.Namespace) -> dict:
    """200 episodes: 50 tasks x 4, one task's environment broken (its setup raises)."""
    async with AsyncClient(url, API_KEY, max_concurrency=64) as c:
        quiz = await c.tasks("quiz")
        tasks = [dict(quiz[i % len(quiz)], n=i) for i in range(50)]
        tasks[17] = dict(tasks[17], broken=True)
        seen: list[tuple[int, int]] = []

        async def policy(s) -> None:
            prompt = await s.prompt()
            assert prompt[0]["text"] == s.task["question"]
            await s.call("submit", {"answer": s.task["answer"]})

        results = await c.rollouts(
            "quiz", tasks, policy, n=4, concurrency=32, labels={"run": "r200"}, progress=lambda *p: seen.append(p)
        )
        return {
            "results": [
                {"task": r.task_index, "sample": r.sample, "reward": r.reward, "steps": r.steps, "error": r.error}
                for r in results
            ],
            "labels": sorted({json.dumps(r.labels) for r in results}),
            "progress_last": seen[-1] if seen else None,
            "progress_calls": len(seen),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("url")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--idle", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=1.5)
    args = parser.parse_args()
    report(asyncio.run(CHECKS[args.check](args.url, args)))


if __name__ == "__main__":
    main()
