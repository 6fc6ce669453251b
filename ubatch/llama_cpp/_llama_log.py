"""llama.cpp's log: messages go to the callback set with llama_log_set (level, text, user_data), else stderr."""
from __future__ import annotations

import sys
import threading

GGML_LOG_LEVEL_NONE, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO = 0, 1, 2
GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT = 3, 4, 5

_state = {"cb": None, "ud": None}
_lock = threading.Lock()


def set_callback(cb, user_data) -> None:
    with _lock:
        _state["cb"] = cb
        _state["ud"] = user_data


def get_callback():
    return _state["cb"], _state["ud"]


def log(level: int, msg: str) -> None:
    if not msg.endswith("\n"):
        msg += "\n"
    cb = _state["cb"]
    if cb:
        try:
            cb(level, msg.encode("utf-8", "replace"), _state["ud"])
            return
        except Exception:  # a broken user callback must not break the caller
            pass
    if level >= GGML_LOG_LEVEL_WARN:
        sys.stderr.write(msg)


def error(msg: str) -> None:
    log(GGML_LOG_LEVEL_ERROR, msg)


def warn(msg: str) -> None:
    log(GGML_LOG_LEVEL_WARN, msg)
