"""The calling convention of a ctypes foreign function, for Python functions that stand in for llama.cpp's C
functions: arguments are converted as ctypes converts them for the declared `argtypes` (integers truncated to
their C width, floats rounded to float32, bytes or None for `char *`, handles as integer addresses), extra
positional arguments are ignored as ctypes ignores them, a missing one raises TypeError, a wrong type raises
ctypes.ArgumentError naming the argument. `argtypes` / `restype` are exposed like a ctypes function's."""
from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable

from ubatch.llama_cpp._handles import HandleError, address

_INTS = (ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16, ctypes.c_uint16, ctypes.c_int32, ctypes.c_uint32,
         ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong,
         ctypes.c_size_t, ctypes.c_ssize_t, ctypes.c_longlong, ctypes.c_ulonglong)


def _converter(t: Any) -> Callable[[Any], Any]:
    if t in _INTS:
        bits = ctypes.sizeof(t) * 8
        signed = t(-1).value < 0
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

        def conv(a, t=t, lo=lo, hi=hi):
            if type(a) is int and lo <= a <= hi:        # the common case: a Python int that fits, unchanged
                return a
            if isinstance(a, ctypes._SimpleCData):      # ctypes passes an instance of the argtype itself
                if isinstance(a, t):
                    return a.value
                raise TypeError("wrong type")
            if isinstance(a, float):
                raise TypeError("int expected instead of float")
            return t(a).value
        return conv
    if t is ctypes.c_bool:
        return bool
    if t in (ctypes.c_float, ctypes.c_double):
        def conv_f(a, t=t):
            if isinstance(a, ctypes._SimpleCData):
                if isinstance(a, t):
                    return a.value
                raise TypeError("wrong type")
            return t(a).value
        return conv_f
    if t is ctypes.c_char_p:
        def conv_s(a):
            if a is None or isinstance(a, bytes):
                return a
            if isinstance(a, ctypes.c_char_p):
                return a.value
            if isinstance(a, (ctypes.Array,)) and a._type_ is ctypes.c_char:
                return a.value
            raise TypeError(f"bytes or None expected instead of {type(a).__name__} instance")
        return conv_s
    if t is ctypes.c_void_p:
        return lambda a: a if type(a) is int and 0 <= a < 2**64 else address(a)
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return _pointer_converter(t)
    return lambda a: a          # structs: the function reads them itself


def _pointee(a: Any) -> Any:
    """The ctypes type an array / pointer / byref argument points at (None for anything else)."""
    if isinstance(a, (ctypes.Array, ctypes._Pointer)):
        return a._type_
    obj = getattr(a, "_obj", None) if type(a).__name__ == "CArgObject" else None
    if isinstance(obj, ctypes.Array):
        return obj._type_
    return type(obj) if obj is not None else None


def _pointer_converter(t: Any) -> Callable[[Any], Any]:
    """A POINTER(T) argument is passed on as given (the function reads it itself), but, as ctypes refuses it, an
    array / pointer / byref of another element type fails: another width or kind of number (an int64 buffer
    for int32 tokens would be written wrongly) or another struct. Same-width types (c_char for c_uint8) and
    byref of an array of T are let through (ctypes is stricter there)."""
    want = t._type_

    def conv(a):
        got = _pointee(a)
        if got is None or got is want:
            return a
        simple = ctypes._SimpleCData
        if isinstance(want, type) and issubclass(want, simple) and isinstance(got, type) and issubclass(got, simple):
            if ctypes.sizeof(got) == ctypes.sizeof(want) and (got._type_ in "fd") == (want._type_ in "fd"):
                return a
        elif not (isinstance(want, type) and issubclass(want, ctypes.Structure)):
            return a
        raise TypeError(f"expected {t.__name__} instance instead of {type(a).__name__}")
    return conv


def cfunc(argtypes: list, restype: Any = None) -> Callable:
    convs = [_converter(t) for t in argtypes]
    n = len(argtypes)

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args):
            if len(args) < n:
                raise TypeError(f"this function takes at least {n} argument{'s' if n != 1 else ''} "
                                f"({len(args)} given)")
            try:
                out = [c(a) for c, a in zip(convs, args)]
            except (TypeError, HandleError, OverflowError):
                for i in range(n):                      # again, one by one, to name the argument
                    try:
                        convs[i](args[i])
                    except (TypeError, HandleError, OverflowError) as e:
                        raise ctypes.ArgumentError(f"argument {i + 1}: {type(e).__name__}: {e}") from None
                raise
            return fn(*out)
        wrapper.argtypes = list(argtypes)
        wrapper.restype = restype
        return wrapper
    return deco
