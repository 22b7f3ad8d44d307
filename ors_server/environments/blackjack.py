"""Blackjack, as Eval Protocol's `blackjack_mcp` serves it: tool `blackjack_move`, gymnasium's rules.

Observations are `{"player_sum", "dealer_card" (1 is an ace), "usable_ace" (0 or 1)}`. HIT draws a card
(a bust loses -1 and ends the hand); STICK lets the dealer play and ends the hand with +1, 0 or -1. The task's
`natural` (a natural blackjack pays 1.5) and `sab` (Sutton & Barto's rules) are passed to gymnasium.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.blackjack import BlackjackEnv

from ors_server import GymEnvironment


class Blackjack(GymEnvironment):
    name = "blackjack"
    tool_name = "blackjack_move"
    tool_description = "Play your Blackjack hand. Actions: STICK, HIT. Returns the new observation."
    action_names = {"STICK": 0, "HIT": 1}
    step_inline = True  # a toy-text step takes microseconds: the thread hop would be most of a call
    task_defaults = {"natural": False, "sab": False}
    example_config = {"game": "Blackjack", "natural": False, "sab": False}

    @classmethod
    def make_env(cls, task_spec: dict[str, Any]) -> BlackjackEnv:
        return BlackjackEnv(natural=bool(task_spec.get("natural", False)), sab=bool(task_spec.get("sab", False)))

    def observe(self, obs: Any) -> dict[str, Any]:
        player_sum, dealer_card, usable_ace = obs
        return {"player_sum": int(player_sum), "dealer_card": int(dealer_card), "usable_ace": int(usable_ace)}

    def instructions(self) -> str:
        return (
            "You are playing Blackjack against the dealer. Get a hand sum closer to 21 than the dealer without "
            "going over. 'player_sum' is your current sum, 'dealer_card' the dealer's showing card (1 is an ace) "
            "and 'usable_ace' is 1 when you hold an ace counted as 11. Use the blackjack_move tool with actions "
            "STICK or HIT: HIT takes another card, STICK keeps your hand and lets the dealer play."
        )
