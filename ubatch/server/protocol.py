"""uvicorn's h11 protocol with a header deadline: a connection that has not sent a complete request head
within `header_timeout` seconds of opening (or of its previous response) is closed, so idle or trickling
sockets cannot pile up (the request body's own deadline is in ubatch.server.validation.read_body). Without
uvicorn's `limit_concurrency` (which counted open sockets, idle ones included) admission is the engine
worker's bounded queue (429)."""
from __future__ import annotations

import asyncio
from typing import Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def guarded_protocol(header_timeout: float):
    """The protocol class for uvicorn.Config(http=...), closing connections after header_timeout seconds
    without a complete request head."""

    class GuardedH11Protocol(H11Protocol):
        _head_timer: Optional[asyncio.TimerHandle] = None

        def _arm_head_timer(self) -> None:
            self._disarm_head_timer()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timeout)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()           # no request head in time: hang up (nothing was started)

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm_head_timer()        # the head is complete: the body deadline takes over

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm_head_timer()           # keep-alive: the next head gets the same deadline

        def connection_lost(self, exc) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

    return GuardedH11Protocol


__all__ = ["guarded_protocol"]
