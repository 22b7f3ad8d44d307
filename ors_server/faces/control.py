"""Eval Protocol control plane (placeholder until the control face lands)."""

from __future__ import annotations

from starlette.routing import BaseRoute


def routes() -> list[BaseRoute]:
    return []
