"""ubatch.llama_cpp.llama_cpp: the low-level module of llama-cpp-python 0.3.36 (`llama_cpp.llama_cpp`) over
ubatch — the same names, signatures, constants, struct layouts and return codes. `_lib` is the CFFI extension
loaded through ctypes, so `_lib.llama_tokenize` is a real C function (llguidance hands its address to native
code). Like the original it exposes the modules it uses (`ctypes`, `os`, `pathlib`)."""
from __future__ import annotations

import ctypes
import os  # noqa: F401  (llama_cpp.os, as in llama-cpp-python)
import pathlib  # noqa: F401
import warnings  # noqa: F401
from ctypes import byref  # noqa: F401  (llama_cpp.byref, as in llama-cpp-python)
from typing import TYPE_CHECKING, Callable, NewType, Optional, Union  # noqa: F401

import ubatch._native as _native_ext
from ubatch.llama_cpp._constants import *  # noqa: F401,F403
from ubatch.llama_cpp._structs import *  # noqa: F401,F403
from ubatch.llama_cpp._core import *  # noqa: F401,F403
from ubatch.llama_cpp._vocab import *  # noqa: F401,F403
from ubatch.llama_cpp._batch import *  # noqa: F401,F403
from ubatch.llama_cpp._sampler_api import *  # noqa: F401,F403
from ubatch.llama_cpp._deprecated import *  # noqa: F401,F403
from ubatch.llama_cpp._missing import *  # noqa: F401,F403
from ubatch.llama_cpp._state_api import *  # noqa: F401,F403
from ubatch.llama_cpp._extra_api import *  # noqa: F401,F403
from ubatch.llama_cpp._core import llama_backend_init  # noqa: F401  (accepts the old numa argument)

_lib_base_name = "ubatch._native"
_lib = ctypes.CDLL(_native_ext.__file__)
_lib.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
_lib.llama_tokenize.restype = ctypes.c_int32

__all__ = [n for n in list(globals()) if not n.startswith("_")]
