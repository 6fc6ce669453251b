"""The FastAPI application: routes, the gate (auth, drain, per-status metrics), error objects, lifespan
(starts the engine thread on the server's event loop, stops it after the HTTP side drained)."""
from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ubatch.server import auth
from ubatch.server.errors import APIError
from ubatch.server.origin import Policy, cors_headers, preflight_headers
from ubatch.server.routes import ROUTES
from ubatch.server.state import ServerState

log = logging.getLogger("ubatch.server")
_KNOWN = {path for path, _, _ in ROUTES}
_OPEN = ("/health",)                     # answered without the API key (load balancers' probes)
_DURING_DRAIN = ("/health", "/metrics")  # still answered while draining


class Gate:
    """Pure ASGI middleware: every HTTP request passes the browser policy (Host, Origin, Content-Type:
    ubatch.server.origin), is authenticated, refused while draining, and counted by endpoint and final status
    (streams count as their 200)."""

    def __init__(self, app, state: ServerState) -> None:
        self.app = app
        self.state = state
        cfg = state.cfg
        self.policy = Policy(cfg.host, cfg.allowed_hosts, list(cfg.cors_origins or []))

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        status = [500]

        async def send_status(msg) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            headers = dict(scope.get("headers") or [])
            method = scope.get("method", "GET")
            cors = self.policy.check(method, path, headers)     # Host, Origin, Content-Type (403 / 415)
            if cors is not None:
                inner = send_status

                async def send_status(msg) -> None:   # noqa: F811 -- the allowed cross-site origin's headers
                    if msg["type"] == "http.response.start":
                        msg = dict(msg, headers=list(msg.get("headers") or []) + cors_headers(cors))
                    await inner(msg)

                if method == "OPTIONS" and b"access-control-request-method" in headers:
                    await Response(status_code=204, headers=preflight_headers(cors))(scope, receive, send)
                    status[0] = 204
                    return
            if path not in _OPEN:
                authz = headers.get(b"authorization")
                auth.check(authz.decode("latin-1") if authz is not None else None, self.state.cfg.api_key)
            if self.state.worker.draining and path not in _DURING_DRAIN:
                raise APIError(503, "the server is shutting down and accepts no new requests",
                               code="shutting_down", headers={"Retry-After": str(self.state.cfg.retry_after_seconds)})
            await self.app(scope, receive, send_status)
        except APIError as e:
            await e.response()(scope, receive, send_status)
        finally:
            self.state.metrics.request_done(path if path in _KNOWN else "other", status[0])


def create_app(state: ServerState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.worker.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            state.worker.begin_drain()
            state.worker.stop()

    app = FastAPI(title="ubatch", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.ub = state
    for path, fn, methods in ROUTES:
        app.add_api_route(path, fn, methods=methods, include_in_schema=False)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        what = {404: f"no such endpoint: {request.url.path}",
                405: f"method {request.method} is not allowed on {request.url.path}"}.get(exc.status_code, exc.detail)
        return APIError(exc.status_code, what, param=None, headers=getattr(exc, "headers", None)).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return APIError(500, "internal error (see the server log)").response()   # no internal text or paths

    app.add_middleware(Gate, state=state)
    return app
