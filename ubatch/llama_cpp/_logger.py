"""llama_cpp._logger: llama.cpp's log routed to the Python logger "llama-cpp-python"."""
from __future__ import annotations

import logging
import sys

GGML_LOG_LEVEL_TO_LOGGING_LEVEL = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
                                   4: logging.ERROR, 5: logging.DEBUG}
logger = logging.getLogger("llama-cpp-python")


def set_verbose(verbose: bool) -> None:
    logger.setLevel(logging.DEBUG if verbose else logging.ERROR)


_last = {"level": logging.CRITICAL}


def _log_to_stderr(level: int, text: bytes, user_data) -> None:
    """Prints llama.cpp's message to stderr when the "llama-cpp-python" logger's level lets it through (a
    GGML_LOG_LEVEL_CONT line takes the previous message's level)."""
    lv = _last["level"] if level == 5 else GGML_LOG_LEVEL_TO_LOGGING_LEVEL.get(level, logging.DEBUG)
    if logger.level <= lv:
        print((text or b"").decode("utf-8", "replace"), end="", flush=True, file=sys.stderr)
    _last["level"] = lv


def _callback():
    from ubatch.llama_cpp._structs import ggml_log_callback
    return ggml_log_callback(_log_to_stderr)


# 0.3.36's callback object, for `llama_log_set(llama_log_callback, None)` (ubatch does not install it at import:
# without a callback llama.cpp's warnings and errors go to stderr, the rest is dropped)
llama_log_callback = _callback()
