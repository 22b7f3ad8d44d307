"""The data an environment hands back: content blocks, tool outputs and splits.

These are the Open Reward Standard types, with the field names exactly as they travel on the wire
(`mimeType` is camelCase there), so an environment written for `openreward` keeps working unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_WireModel):
    """A piece of text shown to the agent."""

    type: Literal["text"] = "text"
    text: str
    detail: Any = None


class ImageBlock(_WireModel):
    """An image shown to the agent: base64 `data` of the given `mimeType`."""

    type: Literal["image"] = "image"
    data: str
    mimeType: str
    detail: Any = None


Block = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]
Blocks = list[Block]


class ToolOutput(_WireModel):
    """What a tool returns: blocks for the agent, and the reward and end of the episode for the trainer.

    `truncated` marks an episode cut short (a step limit rather than a real ending); set it together
    with `finished=True`. It is reported by the control plane and never sent in ORS tool results,
    which carry exactly `blocks`, `metadata`, `reward` and `finished`.
    """

    blocks: Blocks
    metadata: dict[str, Any] | None = None
    reward: float | None = None
    finished: bool = False
    truncated: bool = Field(default=False, exclude=True)


SplitType = Literal["train", "validation", "test"]


class Split(_WireModel):
    """A named set of tasks; `list_splits()` may also return plain names."""

    name: str
    type: SplitType

    @classmethod
    def of(cls, split: str | Split) -> Split:
        """A split from a plain name: `train`, `validation` and `test` name their own type."""
        if isinstance(split, Split):
            return split
        kind: SplitType = split if split in ("train", "validation", "test") else "validation"  # type: ignore[assignment]
        return cls(name=split, type=kind)
