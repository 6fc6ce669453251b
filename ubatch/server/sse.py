"""Server-sent events as OpenAI streams them: `data: <json>\\n\\n` per chunk, `data: [DONE]\\n\\n` at the end."""
from __future__ import annotations

import json

from starlette.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"


class EngineStream(StreamingResponse):
    """A text/event-stream response that cancels its engine requests however it ends: finished, client gone
    before or during the stream, or cancelled at shutdown (a stream whose generator never started would
    otherwise never run its cleanup)."""

    def __init__(self, content, generation) -> None:
        super().__init__(content, media_type=MEDIA_TYPE, headers=HEADERS)
        self._generation = generation

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._generation.cancel()
