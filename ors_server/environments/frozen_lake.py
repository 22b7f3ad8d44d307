"""FrozenLake, as Eval Protocol's `frozen_lake_mcp` serves it: tool `lake_move`, a seeded random map.

The map is `generate_random_map(size, p=0.8, seed=seed)` (size 8 when the task's `map_name` contains "8x8",
else 4) and the lake is not slippery unless the task says `"is_slippery": true`. Observations are
`{"position": row * size + col, "grid": "xFHF\nFHFF\nFFFH\nFHFG"}`: the map as plain text, one line per row, with
the agent's cell shown as `x` (CliffWalking's mark), not gymnasium's ANSI render, whose colour escapes would reach
agents and logs raw. Reaching G pays 1.0; a hole or the goal ends the episode.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map

from ors_server import GymEnvironment


class FrozenLake(GymEnvironment):
    name = "frozen_lake"
    tool_name = "lake_move"
    tool_description = "Move on the frozen lake. Actions: LEFT, DOWN, RIGHT, UP. Returns the new observation."
    action_names = {"LEFT": 0, "DOWN": 1, "RIGHT": 2, "UP": 3}
    step_inline = True  # a toy-text step takes microseconds: the thread hop would be most of a call
    task_defaults = {"map_name": "4x4"}
    example_config = {"game": "FrozenLake", "map_name": "4x4"}

    @classmethod
    def make_env(cls, task_spec: dict[str, Any]) -> FrozenLakeEnv:
        size = 8 if "8x8" in str(task_spec.get("map_name", "4x4")) else 4
        desc = generate_random_map(size=size, p=0.8, seed=task_spec["seed"])
        return FrozenLakeEnv(desc=desc, is_slippery=bool(task_spec.get("is_slippery", False)))

    def observe(self, obs: Any) -> dict[str, Any]:
        assert self.env is not None
        position = int(obs)
        rows = self._map_rows(self.env)
        row, col = divmod(position, len(rows[0]))
        marked = rows[row][:col] + "x" + rows[row][col + 1 :]
        return {"position": position, "grid": "\n".join([*rows[:row], marked, *rows[row + 1 :]])}

    def _map_rows(self, env: Any) -> list[str]:
        """The map's rows as text, read once per env: decoding the numpy map cell by cell on every step was
        most of a move's cost."""
        cached = self.__dict__.get("_rows")
        if cached is None or cached[0] is not env:
            desc = env.unwrapped.desc
            cached = self.__dict__["_rows"] = (env, [b"".join(row).decode() for row in desc.tolist()])
        return cached[1]

    def instructions(self) -> str:
        size = 8 if "8x8" in str(self.task_spec.get("map_name", "4x4")) else 4
        return (
            f"You are playing FrozenLake, a grid-based navigation game displayed as a {size}x{size} text grid. "
            "The grid contains: S (Start), F (Frozen safe), H (Hole - deadly), G (Goal), and x marks your "
            "current cell; 'position' is row * width + column. Reach G without stepping on H: stepping on "
            "H ends the episode with failure. Use the lake_move tool with actions LEFT, DOWN, RIGHT, UP to "
            "navigate the grid."
        )
