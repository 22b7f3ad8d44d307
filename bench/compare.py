"""Is this checkout slower than another? `bench/run.py` for both, interleaved round by round, medians side by side.

    python bench/compare.py --base-dir ../old --base-python ../old/.venv/bin/python [--workloads abcde] [--rounds 3]

The base is another checkout of this repository with its own environment (for example `git worktree add ../old
<commit>` and a venv with `pip install -e ../old`). Each round runs `bench/run.py --rounds 1` in the base, then
here, so both see the same machine weather: on a shared 2-core machine absolute rates swing by 2x between
minutes, and only interleaved medians (and the same-run ratios `bench/run.py` prints) say which is faster.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ROUND = re.compile(r"^  round 1 (\S+)\s+([\d.]+)/s.*?max\s+([\d.]+) ms")
GROWN = re.compile(r"grown_mb=([\d.]+)")
WORKLOAD = re.compile(r"^## \((\w)\)")


def run_once(checkout: Path, python: str, workloads: str, duration: float) -> dict[tuple[str, str], tuple]:
    """(workload, contender) -> (rate, max ms, MB grown or None) from one `bench/run.py --rounds 1`."""
    command = [python, "bench/run.py", "--workloads", workloads, "--rounds", "1", "--duration", str(duration)]
    return parse(subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True).stdout)


def parse(output: str) -> dict[tuple[str, str], tuple]:
    found: dict[tuple[str, str], tuple] = {}
    workload = "?"
    for line in output.splitlines():
        if heading := WORKLOAD.match(line):
            workload = heading.group(1)
        elif row := ROUND.match(line):
            grown = float(m.group(1)) if (m := GROWN.search(line)) else None
            found[(workload, row.group(1))] = (float(row.group(2)), float(row.group(3)), grown)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-dir", type=Path, required=True, help="the other checkout")
    parser.add_argument("--base-python", required=True, help="the Python of the other checkout's environment")
    parser.add_argument("--workloads", default="abcde")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    sides = {"base": (args.base_dir.resolve(), args.base_python), "this": (HERE, sys.executable)}
    rounds: dict[str, list[dict[tuple[str, str], tuple]]] = {"base": [], "this": []}
    for n in range(args.rounds):
        for side, (checkout, python) in sides.items():
            rounds[side].append(run_once(checkout, python, args.workloads, args.duration))
            print(f"round {n + 1} {side} done", flush=True)
    print(
        "\n| workload | contender | base rate /s | this rate /s | this / base | base max ms | this max ms | MB grown |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for key in rounds["base"][0]:
        if not all(key in r for side in rounds.values() for r in side):
            continue
        base = [r[key] for r in rounds["base"]]
        this = [r[key] for r in rounds["this"]]
        b, t = statistics.median(x[0] for x in base), statistics.median(x[0] for x in this)
        grown = ""
        if base[0][2] is not None:
            grown = f"{statistics.median(x[2] for x in base):.1f} -> {statistics.median(x[2] for x in this):.1f}"
        print(
            f"| {key[0]} | {key[1]} | {b:.0f} ({', '.join(f'{x[0]:.0f}' for x in base)}) "
            f"| {t:.0f} ({', '.join(f'{x[0]:.0f}' for x in this)}) | {t / b:.2f} "
            f"| {statistics.median(x[1] for x in base):.0f} | {statistics.median(x[1] for x in this):.0f} | {grown} |"
        )


if __name__ == "__main__":
    main()
