"""The ORS face's group scoring (`Environment.score_group`): a group of candidate completions, scored together.

A scoring job runs beside the call pipeline, not through it: it reads the candidates and the episode's
environment, takes no step, earns no reward and never ends the episode, so it holds neither the episode's lock nor
a place in its counters. Like a call, a job outlives its client (it runs as a task of the session store) and is
kept `call_linger` seconds after its end, so a client whose stream broke re-attaches by id (ORS `task_id`).
User code runs as tools do: async awaited, sync on a tool thread, bounded by `--tool-timeout` (a sync scorer
past it is abandoned: its thread runs on, its result is dropped).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from ors_server.episode import Episode
from ors_server.runtime.resources import run_user_code
from ors_server.sessions import Session, SessionStore
from ors_server.types import GroupCandidate, GroupScore


class ScoringUnsupported(Exception):
    """The session's environment does not score groups."""


@dataclass(eq=False)
class ScoreJob:
    """One `score_group` of one session's episode."""

    id: str
    session: Session
    episode: Episode
    candidates: list[GroupCandidate] | None
    scores: list[GroupScore] | None = None
    error: str | None = None
    """Why scoring failed (the environment raised, returned a wrong count, or ran past the timeout)."""
    ended: anyio.Event = field(default_factory=anyio.Event)
    ended_at: float = 0.0


class Scoring:
    """The scoring jobs of one store's sessions (see the module's docstring)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._jobs: dict[str, ScoreJob] = {}

    def start(self, session: Session, candidates: Sequence[GroupCandidate]) -> ScoreJob:
        """Start scoring `candidates` in the session's current episode; raises ScoringUnsupported."""
        if not session.env_cls.supports_score_group():
            raise ScoringUnsupported(f"'{session.env_name}' does not implement score_group")
        self._forget()
        job = ScoreJob(uuid.uuid4().hex, session, session.episode, list(candidates))
        self._jobs[job.id] = job
        session.touch()
        self.store.runtime.spawn(self._run, job)
        return job

    def find(self, session: Session, job_id: str) -> ScoreJob | None:
        """A job of `session`, running or ended within `call_linger`."""
        self._forget()
        job = self._jobs.get(job_id)
        return job if job is not None and job.session is session else None

    async def _run(self, job: ScoreJob) -> None:
        session, env, candidates = job.session, job.episode.env, job.candidates or []
        try:
            if env is None or job.episode.ended:
                raise RuntimeError("the episode has ended")
            with anyio.fail_after(self.store.settings.tool_timeout):
                returned = await run_user_code(
                    env.score_group, candidates, limiter=self.store.runtime.limiters["tools"]
                )
            scores = [s if isinstance(s, GroupScore) else GroupScore(reward=float(s)) for s in returned]
            if len(scores) != len(candidates):
                raise ValueError(f"score_group returned {len(scores)} scores for {len(candidates)} candidates")
            job.scores = scores
        except TimeoutError:
            job.error = f"score_group did not finish within {self.store.settings.tool_timeout:g} s"
        except Exception as exc:
            job.error = session.redact(str(exc) or type(exc).__name__)
        finally:
            job.candidates = None
            job.ended_at = time.monotonic()
            job.ended.set()
            session.touch()

    def _forget(self) -> None:
        horizon = time.monotonic() - self.store.settings.call_linger
        for job_id in [i for i, job in self._jobs.items() if job.ended_at and job.ended_at < horizon]:
            del self._jobs[job_id]
