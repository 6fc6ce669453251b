"""Running the app under uvicorn with ubatch's shutdown: on SIGTERM / SIGINT the engine stops taking
requests (503) at once, the listening socket closes, in-flight requests get `grace_seconds` to finish
(uvicorn's graceful timeout), then the rest are cancelled (their sequences leave the engine) and the
engine thread stops. The bound address is printed once listening (port 0 picks a free port)."""
from __future__ import annotations

import contextlib
import sys

import uvicorn

from ubatch.server.app import create_app
from ubatch.server.protocol import guarded_protocol
from ubatch.server.state import ServerState


class UbatchServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.ub_state = state

    def handle_exit(self, sig, frame) -> None:
        self.ub_state.worker.begin_drain()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        """As uvicorn's, but a SIGTERM / SIGINT that led to a completed drain is not re-raised: the process
        exits with status 0 (uvicorn would re-deliver the signal and die of it)."""
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                print(f"ubatch serve: listening on http://{host}:{port} (model {self.ub_state.model_id})",
                      flush=True, file=sys.stderr)


def run(state: ServerState, *, log_level: str = "warning") -> int:
    cfg = state.cfg
    app = create_app(state)
    # no limit_concurrency: it counted open sockets, so idle ones locked everybody out; the header deadline
    # closes those, the engine worker's bounded queue answers 429 for real load
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=max(0.0, float(cfg.grace_seconds)), lifespan="on",
                            h11_max_incomplete_event_size=64 * 1024,
                            http=guarded_protocol(float(cfg.header_timeout)))
    server = UbatchServer(config, state)
    server.run()
    return 0
