"""What the front answers itself, in the shape of the face the request belongs to.

The front knows the faces by their shapes alone (`ors_server.http.app.SHAPES`: their routes and error renderers, with
no environments, store or faces behind them), so a 410 for a lost session or a 503 while no worker can take a
request reads exactly as a single server's refusal on that face.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Scope

from ors_server.errors import OrsError, Refused, Unavailable
from ors_server.faces import FaceTable
from ors_server.http.app import DEFAULT_FACE, SHAPES

LOST = "Session lost: the worker that held it is gone"
BUSY = "No worker can take this request now"


class Refusals:
    def __init__(self) -> None:
        self.faces = FaceTable([shape() for shape in SHAPES], default=DEFAULT_FACE)

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
