"""OpenAI-style error objects: every refusal is `{"error": {"message", "type", "param", "code"}}`.

`APIError` carries the HTTP status, the message (which names the culprit), the offending field (`param`,
dotted path such as "messages.0.content") and extra headers (Retry-After for 429/503)."""
from __future__ import annotations

from typing import Dict, Optional

from starlette.responses import JSONResponse

# status -> OpenAI error type
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 408: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
          500: "server_error", 503: "server_error"}


class APIError(Exception):
    """A request the server refuses or could not complete; rendered as an OpenAI error object."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.message!r}, param={self.param!r})"
