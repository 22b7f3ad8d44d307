"""The OpenEnv face's plain HTTP routes: what an environment is (`/health`, `/metadata`, `/schema`,
`/openapi.json`) and OpenEnv's stateless simulation routes (`/reset`, `/step`, `/state`: a fresh episode per
request)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ors_server.environment import Environment
from ors_server.errors import ReadFailed
from ors_server.faces.openenv import native
from ors_server.faces.openenv.sessions import OpenEnvFace
from ors_server.faces.openenv.wire import (
    CREATED_BY,
    CallToolObservation,
    EpisodeState,
    FrameError,
    ListToolsAction,
    ResetRequest,
    StepRequest,
    action_schema,
    described,
    list_tools_payload,
    parse_action,
    reset_payload,
    server_version,
    step_payload,
    validation_errors,
)
from ors_server.faces.ors import BodyInvalid, read_body
from ors_server.sessions import Session

_SCHEMAS: dict[str, dict[str, Any]] = {}


def _schemas(env_cls: type[Environment]) -> dict[str, Any]:
    if env_cls.name not in _SCHEMAS:
        _SCHEMAS[env_cls.name] = _build_schemas(env_cls)
    return _SCHEMAS[env_cls.name]


def _build_schemas(env_cls: type[Environment]) -> dict[str, Any]:
    return {
        "action": action_schema(env_cls),
        "observation": CallToolObservation.model_json_schema(),
        "state": EpisodeState.model_json_schema(),
        "reset_observation": {
            "type": "object",
            "description": "The episode's initial observation: a JSON object as the environment gives it, "
            "anything else as {'observation': value}.",
        },
    }


_OPERATIONS = {
    "/ws": ("get", "The session channel (WebSocket): reset, step, state, close and mcp frames."),
    "/mcp": ("post", "OpenEnv's JSON-RPC: tools/list, tools/call, openenv/session/create and openenv/session/close."),
    "/health": ("get", "Health check."),
    "/schema": ("get", "JSON Schemas of the action, observation and state."),
    "/metadata": ("get", "What this environment is."),
    "/reset": ("post", "Reset a fresh environment (stateless: a new episode per request)."),
    "/step": ("post", "Step a fresh environment (stateless: a new episode per request)."),
    "/state": ("get", "The state of a fresh environment."),
}


class StatelessHttp:
    """The plain HTTP routes over the face's sessions."""

    def __init__(self, face: OpenEnvFace) -> None:
        self.face = face

    async def health(self, request: Request) -> Response:
        self.face.env_of(request.scope, request.path_params.get("env"))
        return JSONResponse({"status": "healthy"})

    async def metadata(self, request: Request) -> Response:
        env_cls = self.face.env_of(request.scope, request.path_params.get("env"))
        hosted = described(env_cls)
        if hosted is not None and "metadata" in hosted:
            return JSONResponse(hosted["metadata"])  # the class's own get_metadata()
        doc = (env_cls.__doc__ or "").strip()
        return JSONResponse(
            {
                "name": env_cls.name,
                "description": doc.splitlines()[0] if doc else f"The {env_cls.name} environment, served by ors-server.",
                "readme_content": None,
                "version": server_version(),
                "author": None,
                "documentation_url": None,
            }
        )

    async def schema(self, request: Request) -> Response:
        env_cls = self.face.env_of(request.scope, request.path_params.get("env"))
        hosted = described(env_cls)
        if hosted is not None and "schema" in hosted:
            return JSONResponse(hosted["schema"])  # the class's action, observation and state models
        return JSONResponse(_schemas(env_cls))

    async def openapi(self, request: Request) -> Response:
        env_cls = self.face.env_of(request.scope, request.path_params.get("env"))
        paths = {
            path: {method: {"summary": summary, "responses": {"200": {"description": "OK"}}}}
            for path, (method, summary) in _OPERATIONS.items()
        }
        info = {"title": f"{env_cls.name} (OpenEnv face of ors-server)", "version": server_version()}
        return JSONResponse({"openapi": "3.1.0", "info": info, "paths": paths})

    async def reset(self, request: Request) -> Response:
        face = self.face
        env_cls = face.env_of(request.scope, request.path_params.get("env"))
        body: ResetRequest = await read_body(request, ResetRequest, empty_ok=True)
        if described(env_cls) is not None:
            kwargs = body.model_dump(exclude_unset=True)

            async def reset_observation(session: Session) -> Any:
                return await native.ask(face.store, session, "reset_observation")

            answered = await _http_of(face.one_off(env_cls, reset_observation, config={"task_spec": kwargs}))
            return JSONResponse({"metadata": None, **answered})

        async def observe(session: Session) -> Any:
            return await face.store.initial_observation(session)

        observation = await face.one_off(env_cls, observe, seed=body.seed, config=body.config())
        return JSONResponse({"metadata": None, **reset_payload(observation)})

    async def step(self, request: Request) -> Response:
        face = self.face
        env_cls = face.env_of(request.scope, request.path_params.get("env"))
        body: StepRequest = await read_body(request, StepRequest)
        try:
            action = parse_action(env_cls, body.action)
        except ValidationError as exc:
            raise BodyInvalid(validation_errors(exc)) from None
        if isinstance(action, ListToolsAction):
            return JSONResponse({"metadata": None, **list_tools_payload(await face.calls.tools(env_cls))})

        async def call(session: Session) -> dict[str, Any]:
            result = await face.calls.call(session, action.name, action.arguments, face=CREATED_BY)
            answered = native.step_data(result) if described(env_cls) is not None else None
            return answered if answered is not None else step_payload(action.name, result, session)

        return JSONResponse({"metadata": None, **(await _http_of(face.one_off(env_cls, call)))})

    async def state(self, request: Request) -> Response:
        self.face.env_of(request.scope, request.path_params.get("env"))
        return JSONResponse({"episode_id": None, "step_count": 0})


async def _http_of(work: Awaitable[Any]) -> Any:
    """The result of `work`; an OpenEnv error envelope raised by it in FastAPI's shape (422 for a refused action,
    500 for a class that raised), as OpenEnv's stateless routes answer."""
    try:
        return await work
    except FrameError as error:
        if error.code == "VALIDATION_ERROR":
            raise BodyInvalid(error.extra.get("errors") or [{"msg": error.message}]) from None
        raise ReadFailed(error.message) from None
