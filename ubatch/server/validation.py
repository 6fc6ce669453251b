"""Request bodies in: size limit, JSON parsing and schema validation, each failure an APIError naming the
field. Malformed JSON or a body that is not an object -> 400; wrong types / missing or out-of-range fields ->
422; a body larger than the limit -> 413; a body that does not arrive within the body timeout -> 408."""
from __future__ import annotations

import asyncio
import json
from typing import Optional, Type, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from ubatch.server.errors import APIError

M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request, limit: int, timeout: Optional[float] = None) -> bytes:
    """The raw body, refused with 413 as soon as it exceeds `limit` bytes (Content-Length or streamed), and with
    408 when it has not fully arrived `timeout` seconds after its head (a trickling client)."""
    if timeout is None:
        return await _read_body(request, limit)
    try:
        return await asyncio.wait_for(_read_body(request, limit), timeout)
    except asyncio.TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout:g} s", param="body",
                       code="body_timeout", headers={"Connection": "close"})


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise APIError(400, f"invalid Content-Length header {declared!r}", param="Content-Length")
        if n > limit:
            raise APIError(413, f"request body of {n} bytes exceeds the limit of {limit} bytes",
                           code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"request body exceeds the limit of {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _param(loc) -> str:
    return ".".join(str(x) for x in loc) if loc else "body"


def parse(raw: bytes, model: Type[M]) -> M:
    """JSON object -> the request model, or APIError(400 | 422) naming the field."""
    if not raw.strip():
        raise APIError(400, "the request body is empty: a JSON object is expected", param="body")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"malformed JSON in the request body: {e}", param="body", code="invalid_json")
    except RecursionError:
        raise APIError(400, "malformed JSON in the request body: nested too deeply", param="body",
                       code="invalid_json")
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(data).__name__}", param="body")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(err.get("loc"))
        if err.get("type") == "finite_number":           # NaN / Infinity (Python's json accepts them)
            raise APIError(400, f"{param}: must be a finite number, got {err.get('input')!r}", param=param,
                           code="invalid_value")
        raise APIError(422, f"{param}: {err.get('msg')}", param=param, code="invalid_type"
                       if "type" in str(err.get("type")) else "invalid_value")
