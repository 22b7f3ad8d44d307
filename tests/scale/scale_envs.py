"""An environment for the front's streaming test: a tool that waits for a file the test creates."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from ors_server import TextBlock, ToolOutput, tool
from tests.ors_envs import SingleTask


class Gated(SingleTask):
    """`wait` answers once the file named by `ORS_GATE_FILE` exists (boundedly), so a test controls when."""

    name = "gated"

    def get_prompt(self):
        return [TextBlock(text="wait")]

    @tool
    async def wait(self) -> ToolOutput:
        """Answer when the gate file appears ("through"), or after 20 s without it ("timed out"). Touches
        `<gate file>.waiting` on starting, and reports progress 1 of 2 then."""
        gate = Path(os.environ["ORS_GATE_FILE"])
        await anyio.Path(f"{gate}.waiting").touch()  # tells the test the call is under way
        self.report_progress(1, 2, "waiting at the gate")
        with anyio.move_on_after(20):
            while True:  # another process opens the gate: a file is the only signal it can give
                if await anyio.Path(gate).exists():
                    return ToolOutput(blocks=[TextBlock(text="through")], reward=1.0, finished=True)
                await anyio.sleep(0.01)
        return ToolOutput(blocks=[TextBlock(text="timed out")], reward=0.0, finished=True)
