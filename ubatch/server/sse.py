"""Server-sent events as OpenAI streams them: `data: <json>\\n\\n` per chunk, `data: [DONE]\\n\\n` at the end."""
from __future__ import annotations

import json

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"
