"""The ORS face's OpenAPI document, built from the same endpoint table as its routes (`faces.ors.ENDPOINTS`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ors_server.registry import Registry
from ors_server.sessions import SESSION_ID


@dataclass(frozen=True)
class Endpoint:
    """One route of the ORS face: the router and this document are both built from a table of these."""

    path: str
    handler: str
    """The name of the face's method that serves it."""
    method: str
    summary: str
    body: type[BaseModel] | None = None
    session: bool = False
    per_env: bool = False
    """Served as `/{env}/path` for every environment and as the bare path."""


_ERROR = {"type": "object", "properties": {"detail": {}}, "required": ["detail"]}
_SSE_PATHS = {"/call"}


def _schema_ref(model: type[BaseModel], components: dict[str, Any]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(endpoint: Endpoint, env_param: dict[str, Any] | None, components: dict[str, Any]) -> dict[str, Any]:
    parameters = [env_param] if env_param else []
    if endpoint.session:
        parameters.append(
            {
                "name": "X-Session-ID",
                "in": "header",
                "required": True,
                "schema": {"type": "string", "pattern": f"^{SESSION_ID.pattern}$"},
            }
        )
    if endpoint.path in _SSE_PATHS:
        ok = {
            "description": "Server-sent events: task_id, chunk*, end (or error)",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    else:
        ok = {"description": "OK", "content": {"application/json": {"schema": {}}}}
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "operationId": ("env_" if env_param else "") + endpoint.path.strip("/"),
        "parameters": parameters,
        "responses": {
            "200": ok,
            "4XX": {"description": "Client error", "content": {"application/json": {"schema": _ERROR}}},
            "503": {"description": "Starting or full; retry", "content": {"application/json": {"schema": _ERROR}}},
        },
    }
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _schema_ref(endpoint.body, components)}},
        }
    return operation


def openapi_document(registry: Registry, endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    env_param = {"name": "env", "in": "path", "required": True, "schema": {"type": "string", "enum": registry.names}}
    for endpoint in endpoints:
        method = endpoint.method.lower()
        paths.setdefault(endpoint.path, {})[method] = _operation(endpoint, None, components)
        if endpoint.per_env:
            paths.setdefault("/{env}" + endpoint.path, {})[method] = _operation(endpoint, env_param, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "ors-server: Open Reward Standard API", "version": "1"},
        "paths": paths,
        "components": {"schemas": components},
    }
