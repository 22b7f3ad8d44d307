"""The same episodes with the `ors-sdk` client: `ors_sdk_episode.py URL ENV` (always explicit `/{env}/...` paths)."""

from __future__ import annotations

import argparse

import _episodes
from _common import API_KEY, report
from ors.client import ORS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("env")
    parser.add_argument("--answer-key", default="answer")
    args = parser.parse_args()
    with ORS(base_url=args.base_url, api_key=API_KEY) as client:
        result = _episodes.run(client.environment(args.env), args.base_url, args.answer_key)
    report(result)


if __name__ == "__main__":
    main()
