"""The data an environment hands back: content blocks, tool outputs and splits.

These are the Open Reward Standard types, with the field names exactly as they travel on the wire
(`mimeType` is camelCase there), so an environment written for `openreward` keeps working unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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


# Conversations (`Environment.get_messages`) and group scoring (`Environment.score_group`), as `openreward` 0.1.157+
# has them on the wire.


class ReasoningBlock(_WireModel):
    """A reasoning segment of an assistant turn; `signature` passes a provider's signed thinking through."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    detail: Any = None


class ToolCallBlock(_WireModel):
    """A tool call inside an assistant turn."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    input: dict[str, Any]
    detail: Any = None


class ToolResultBlock(_WireModel):
    """A tool's result inside a user turn, matched to its call by `tool_call_id`."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    blocks: Blocks
    is_error: bool = False
    detail: Any = None


MessageBlock = Annotated[
    TextBlock | ImageBlock | ReasoningBlock | ToolCallBlock | ToolResultBlock, Field(discriminator="type")
]
MESSAGE_BLOCK_TYPES = ["text", "image", "reasoning", "tool_call", "tool_result"]
"""The block types a message may carry (ORS `message_block_types`)."""
_ROLE_BLOCKS = {
    "system": {"text", "image"},
    "user": {"text", "image", "tool_result"},
    "assistant": {"text", "image", "reasoning", "tool_call"},
}


class Message(_WireModel):
    """One turn of a conversation: reasoning and tool calls belong to assistant turns, tool results to user turns."""

    role: Literal["system", "user", "assistant"]
    blocks: list[MessageBlock]
    detail: Any = None

    @model_validator(mode="after")
    def _blocks_fit_the_role(self) -> Message:
        for block in self.blocks:
            if block.type not in _ROLE_BLOCKS[self.role]:
                raise ValueError(f"a {block.type!r} block is not valid in a {self.role!r} message")
        return self

    def text(self) -> str:
        """The text of its text blocks, one per line (what a judge of the final answer reads)."""
        return "\n".join(block.text for block in self.blocks if isinstance(block, TextBlock))


class GroupCandidate(_WireModel):
    """One rollout's completion, scored with the rest of its group (`Environment.score_group`); `metadata` is the
    trainer's own and is echoed untouched."""

    messages: list[Message]
    metadata: dict[str, Any] | None = None

    def final_answer(self, tool: str | None = None, field: str = "answer") -> str:
        """What the candidate answered: in its last assistant turn, the `field` of its last call to `tool` when it
        made one (a `submit` call), else that turn's text ("" without an assistant turn)."""
        turns = [message for message in self.messages if message.role == "assistant"]
        if not turns:
            return ""
        calls = [b for b in turns[-1].blocks if isinstance(b, ToolCallBlock) and b.name == tool]
        if calls and field in calls[-1].input:
            return str(calls[-1].input[field])
        return turns[-1].text()


class GroupScore(_WireModel):
    """The score of one candidate, index-aligned with the request."""

    reward: float
    metadata: dict[str, Any] | None = None
