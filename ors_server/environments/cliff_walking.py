"""CliffWalking, as Eval Protocol's `cliff_walking_mcp` serves it: tool `cliff_move` on gymnasium's 4x12 grid.

Every step costs -1; stepping into the cliff (cells 37-46) costs -100 and sends the agent back to the start
(36) without ending the episode; reaching the target (47) ends it. The map is fixed, so the seed changes
nothing here. Observations are `{"position": row * 12 + col, "grid": <gymnasium's ANSI render>}`.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv

from ors_server import GymEnvironment


class CliffWalking(GymEnvironment):
    name = "cliff_walking"
    tool_name = "cliff_move"
    tool_description = "Move on the cliff grid. Actions: UP, RIGHT, DOWN, LEFT. Returns the new observation."
    action_names = {"UP": 0, "RIGHT": 1, "DOWN": 2, "LEFT": 3}
    step_inline = True  # a toy-text step takes microseconds: the thread hop would be most of a call
    example_config = {"game": "CliffWalking"}

    @classmethod
    def make_env(cls, task_spec: dict[str, Any]) -> CliffWalkingEnv:
        return CliffWalkingEnv(render_mode="ansi")

    def observe(self, obs: Any) -> dict[str, Any]:
        assert self.env is not None
        return {"position": int(obs), "grid": self.env.render()}

    def instructions(self) -> str:
        return (
            "You are playing CliffWalking on a 4x12 grid: x (your position), o (safe place), C (the cliff), "
            "T (the target). You start at position (3, 0), the bottom-left corner, and must reach the target "
            "T at the bottom-right. Each step gives a reward of -1; stepping into the cliff sends you back to "
            "(3, 0) with a reward of -100. Use the cliff_move tool with actions LEFT, DOWN, RIGHT, UP."
        )
