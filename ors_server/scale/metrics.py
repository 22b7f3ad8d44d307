"""One `/metrics` for a deployment: every worker's scrape, each sample labelled with its `worker`.

Families keep their `# HELP`/`# TYPE` lines once, followed by the samples of every worker, so the result is
valid Prometheus text; counters of different workers are summed in PromQL (`sum without (worker)`).
"""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?(\s.*)")


def merge(scrapes: dict[str, str], own: str = "") -> str:
    """`scrapes` (worker label -> Prometheus text) as one exposition, followed by the front's `own` text."""
    meta: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    order: list[str] = []
    for worker, text in scrapes.items():
        family = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    if family not in meta:
                        meta[family], samples[family] = [], []
                        order.append(family)
                    if len(meta[family]) < 2 and not any(m.split(None, 2)[1] == parts[1] for m in meta[family]):
                        meta[family].append(line)
                continue
            match = _SAMPLE.fullmatch(line)
            if match is None:
                continue
            name, labels, rest = match.groups()
            label = f'worker="{worker}"'
            labelled = f"{name}{{{label},{labels[1:]}" if labels and labels != "{}" else f"{name}{{{label}}}"
            if family not in samples:
                meta[family], samples[family] = [], []
                order.append(family)
            samples[family].append(labelled + rest)
    lines = []
    for family in order:
        lines += meta[family] + samples[family]
    return "\n".join(lines) + "\n" + own
