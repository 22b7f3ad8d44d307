"""What the front answers itself, in the shape of the face the request belongs to.

The front builds the same faces a worker does (over a store that never runs), so a 410 for a lost session
or a 503 while no worker can take a request reads exactly as a single server's refusal on that face.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response
from starlette.types import Scope

from ors_server.app import DEFAULT_FACE, FACES
from ors_server.calls import Calls
from ors_server.environment import Environment
from ors_server.errors import OrsError, Refused, Unavailable
from ors_server.faces import Core, FaceTable
from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings

LOST = "Session lost: the worker that held it is gone"
BUSY = "No worker can take this request now"


class Refusals:
    def __init__(self, environments: Sequence[type[Environment]], settings: Settings) -> None:
        store = SessionStore(settings)
        core = Core(Registry(environments), store, Calls(store), settings)
        self.faces = FaceTable([make(core) for make in FACES], default=DEFAULT_FACE)

    def response(self, scope: Scope, error: OrsError) -> Response:
        return self.faces.of(scope).render_error(error)

    def lost(self, scope: Scope) -> Response:
        return self.response(scope, Refused(410, LOST))

    def busy(self, scope: Scope) -> Response:
        return self.response(scope, Unavailable(BUSY))

    def not_found(self, scope: Scope) -> Response:
        return self.response(scope, Refused(404, "Not Found"))

    def worker_failed(self, scope: Scope) -> Response:
        return self.response(scope, Refused(502, "The worker failed to answer"))

    def too_large(self, scope: Scope, limit: int) -> Response:
        return self.response(scope, Refused(413, f"request body larger than {limit} bytes"))
