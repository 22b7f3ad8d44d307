"""A composed tool server's `CallToolResult` as the `ToolOutput` blocks every face renders."""

from __future__ import annotations

import json

from mcp import types

from ors_server.types import Blocks, ImageBlock, TextBlock, ToolOutput


def _block(content: types.ContentBlock) -> TextBlock | ImageBlock:
    if isinstance(content, types.TextContent):
        return TextBlock(text=content.text)
    if isinstance(content, types.ImageContent):
        return ImageBlock(data=content.data, mimeType=content.mime_type)
    if isinstance(content, types.EmbeddedResource):
        resource = content.resource
        if isinstance(resource, types.TextResourceContents):
            return TextBlock(text=resource.text)
        return TextBlock(text=f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'})]")
    if isinstance(content, types.ResourceLink):
        return TextBlock(text=f"[resource {content.name}: {content.uri}]")
    # Audio, or a content type newer than this server: named rather than dropped without a trace.
    return TextBlock(text=f"[{content.type} content not shown]")


def to_output(result: types.CallToolResult) -> ToolOutput:
    """The result's content as blocks (text and images as they are; resources as their text or a mention), its
    structured content as `metadata["structured_content"]` (and as JSON text when there is no other content).
    A composed tool earns no reward and never ends the episode: only the environment's own tools do."""
    blocks: Blocks = [_block(content) for content in result.content]
    structured = result.structured_content
    if not blocks:
        blocks = [TextBlock(text=json.dumps(structured) if structured is not None else "")]
    metadata = {"structured_content": structured} if structured is not None else None
    return ToolOutput(blocks=blocks, metadata=metadata)


def error_text(result: types.CallToolResult) -> str:
    """The text of a failed call's result (`isError`), for the error every face reports."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return "\n".join(texts) or (json.dumps(result.structured_content) if result.structured_content else "failed")
