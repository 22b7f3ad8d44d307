"""The garbage collector under sustained load: what finished calls kept for replay cost a long-running server.

    python bench/sustained.py [--seconds 40] [--rounds 2]

`ors-server serve` runs with a probe (a `sitecustomize` of this script's) that times every collection, and
`ors-client` (from the test suite's client venvs) drives 8 sessions calling the `counter` tool for `--seconds`.
A short run never shows it: finished calls are kept `call_linger` (60 s), so the collector's full collections
walk more of them the longer the server runs. Each round runs the server as it is and, as the baseline, with
`ToolCall.pack` switched off (the kept results as objects rather than JSON text), one after the other.
Printed per run: calls/s, the collector's seconds (all generations, and full collections alone), the number of
full collections, the longest pause, and the objects the collector tracks at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.client import our_server, run_client  # noqa: E402

PROBE = """
import gc, json, os, time

if os.environ.get("BENCH_NO_PACK"):
    import ors_server.calls
    ors_server.calls.ToolCall.pack = lambda self: None

_stats = {"seconds": 0.0, "full_seconds": 0.0, "collections": [0, 0, 0], "longest_ms": 0.0}
_began = [0.0]
_out = os.environ["BENCH_GC_OUT"]


def _timed(phase, info):
    if phase == "start":
        _began[0] = time.perf_counter()
        return
    took = time.perf_counter() - _began[0]
    generation = info["generation"]
    _stats["seconds"] += took
    _stats["collections"][generation] += 1
    _stats["longest_ms"] = max(_stats["longest_ms"], took * 1000)
    if generation == 2:
        _stats["full_seconds"] += took
    if generation == 2 or sum(_stats["collections"]) % 100 == 0:  # the latest figures, for the bench to read
        with open(_out, "w") as out:
            json.dump({**_stats, "tracked": len(gc.get_objects())}, out)


gc.callbacks.append(_timed)
"""


def one_run(seconds: float, pack: bool) -> dict:
    probe = Path(tempfile.mkdtemp(prefix="ors-bench-gc-"))
    (probe / "sitecustomize.py").write_text(textwrap.dedent(PROBE))
    out = probe / "gc.json"
    env = {"PYTHONPATH": os.pathsep.join([str(probe), str(ROOT)]), "BENCH_GC_OUT": str(out)}
    if not pack:
        env["BENCH_NO_PACK"] = "1"
    with our_server(max_sessions=64, env=env) as url:
        result = run_client("ors-client", url, "calls", 8, seconds)
        stats = json.loads(out.read_text())
    return {**stats, "rate": result["done"] / result["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"packed": [], "not packed": []}
    for round_no in range(args.rounds):
        for name in ("packed", "not packed") if round_no % 2 == 0 else ("not packed", "packed"):
            got = one_run(args.seconds, pack=name == "packed")
            runs[name].append(got)
            print(
                f"round {round_no + 1} {name:10} {got['rate']:7.0f} calls/s  gc {got['seconds']:.2f} s "
                f"(full {got['full_seconds']:.2f} s, {got['collections'][2]} full)  longest {got['longest_ms']:.0f} ms"
                f"  tracked {got['tracked']}",
                flush=True,
            )
    print(f"\nmedians over {args.rounds} rounds of {args.seconds:g} s")
    for name, got in runs.items():
        median = {key: statistics.median(run[key] for run in got) for key in ("rate", "seconds", "longest_ms")}
        print(
            f"{name:10} {median['rate']:7.0f} calls/s  gc {median['seconds']:.2f} s  "
            f"longest {median['longest_ms']:.0f} ms"
        )
    packed, baseline = (statistics.median(r["seconds"] for r in runs[k]) for k in ("packed", "not packed"))
    print(f"collector time: {packed / baseline:.2f}x the baseline's")


if __name__ == "__main__":
    main()
