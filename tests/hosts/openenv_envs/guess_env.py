"""A plain OpenEnv `Environment` with a typed action: guess a number between 1 and 20 in at most five tries.

Written against OpenEnv 0.10 only (it runs in OpenEnv's venv, under OpenEnv's own `create_app` and hosted by
ors-server with `--env openenv:guess_env:GuessEnvironment@PYTHON`). Rewards: 1.0 for the right guess, 0.0 when
the tries run out; a step after the episode is done answers with `done` and no reward, as this class decides.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MAX_TRIES = 5


class GuessAction(Action):
    guess: int = Field(ge=1, le=20, description="Your guess, 1 to 20.")


class GuessObservation(Observation):
    hint: str = Field(description="'higher', 'lower', 'correct', or what happened.")
    tries_left: int


class GuessState(State):
    target: int | None = None


class GuessEnvironment(Environment[GuessAction, GuessObservation, GuessState]):
    """Guess the number: each guess is answered 'higher' or 'lower'."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = GuessState()
        self._tries_left = MAX_TRIES
        self._done = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        target = kwargs.get("target")
        self._state = GuessState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            target=int(target) if target is not None else random.Random(seed).randint(1, 20),
        )
        self._tries_left = MAX_TRIES
        self._done = False
        return GuessObservation(hint="Guess a number from 1 to 20.", tries_left=MAX_TRIES, reward=0.0)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        if self._state.target is None:
            raise RuntimeError("reset first")
        if self._done:
            return GuessObservation(hint="The episode is over.", tries_left=0, done=True, reward=None)
        self._state.step_count += 1
        self._tries_left -= 1
        if action.guess == self._state.target:
            self._done = True
            return GuessObservation(hint="correct", tries_left=self._tries_left, done=True, reward=1.0)
        self._done = self._tries_left == 0
        hint = "higher" if action.guess < self._state.target else "lower"
        return GuessObservation(hint=hint, tries_left=self._tries_left, done=self._done, reward=0.0)

    @property
    def state(self) -> GuessState:
        return self._state


class SoloGuessEnvironment(GuessEnvironment):
    """The same game, from a class that does not declare concurrent sessions (OpenEnv would serve one at a time)."""

    SUPPORTS_CONCURRENT_SESSIONS = False
