"""llama_cpp._logger: llama.cpp's log routed to the Python logger "llama-cpp-python"."""
from __future__ import annotations

import logging

GGML_LOG_LEVEL_TO_LOGGING_LEVEL = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
                                   4: logging.ERROR, 5: logging.DEBUG}
logger = logging.getLogger("llama-cpp-python")


def set_verbose(verbose: bool) -> None:
    logger.setLevel(logging.DEBUG if verbose else logging.ERROR)
