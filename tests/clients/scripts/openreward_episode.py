"""The ors-wire.md §6 snippet with the official `openreward` client: `openreward_episode.py URL ENV VARIANT`.

VARIANT is the env name for explicit `/{env}/...` paths, or `none` for the bare paths the client uses
without a variant (the server maps them to its default environment).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

import _episodes  # noqa: E402
from _common import API_KEY, report  # noqa: E402
from openreward import OpenReward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("env")
    parser.add_argument("variant", help="the variant, or 'none'")
    parser.add_argument("--answer-key", default="answer")
    args = parser.parse_args()
    variant = None if args.variant == "none" else args.variant
    with OpenReward(api_key=API_KEY or "local") as client:
        env = client.environments.get(name=args.env, variant=variant, base_url=args.base_url)
        result = _episodes.run(env, args.base_url, args.answer_key)
    report(result)


if __name__ == "__main__":
    main()
