"""What the client hands back: tool outputs and per-episode results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def blocks_text(blocks: list[dict[str, Any]]) -> str:
    """The text blocks joined by newlines (images and other blocks left out)."""
    return "\n".join(b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))


@dataclass(slots=True)
class ToolOutput:
    """One tool call's result. `ok=False` when the server refused the call as the agent's mistake (unknown
    tool, invalid input, episode already finished): then `error` says why and `reason` is the wire's code."""

    ok: bool
    blocks: list[dict[str, Any]] = field(default_factory=list)
    reward: float | None = None
    finished: bool = False
    metadata: Any = None
    error: str | None = None
    reason: str | None = None

    @property
    def text(self) -> str:
        """The observation as text: the text blocks joined, or the error of a refused call."""
        if not self.ok:
            return self.error or ""
        return blocks_text(self.blocks)

    @classmethod
    def from_wire(cls, result: dict[str, Any]) -> ToolOutput:
        if not result.get("ok"):
            return cls(ok=False, error=str(result.get("error", "")), reason=result.get("reason"))
        output = result.get("output") or {}
        return cls(
            ok=True,
            blocks=list(output.get("blocks") or []),
            reward=output.get("reward"),
            finished=bool(output.get("finished")),
            metadata=output.get("metadata"),
        )


@dataclass(slots=True)
class EpisodeResult:
    """One episode of `rollouts`: what the policy got, or the error that ended it (the others go on)."""

    env: str
    task: dict[str, Any]
    task_index: int
    sample: int
    """Which of the `n` episodes of this task."""
    reward: float
    """The sum of the rewards the episode's calls returned."""
    steps: int
    """Tool calls made."""
    finished: bool
    duration: float
    """Seconds from opening the session to deleting it."""
    error: str | None = None
    """`"ExceptionType: message"` when the episode failed, else None."""
    labels: dict[str, str] = field(default_factory=dict)
