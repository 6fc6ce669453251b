"""llama_state_* of llama-cpp-python 0.3.36 over ubatch.llama_cpp._state (the bytes are ubatch's format, not
llama.cpp's): whole-context state to a buffer / from a buffer, to a file / from a file with the prompt tokens
(session files), and the deprecated names of the same (llama_get_state_size, llama_copy_state_data,
llama_set_state_data, llama_load_session_file, llama_save_session_file) with a DeprecationWarning. Failures
return llama.cpp's values (0 / False) and log the reason, as llama.cpp does; nothing raises."""
from __future__ import annotations

import ctypes
import os
import struct
import warnings

import numpy as np

from ubatch.llama_cpp import _llama_log, _state
from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._core import _obj

_vp, _sz, _i32, _u32, _b, _cp = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_uint32, ctypes.c_bool,
                                 ctypes.c_char_p)
_u8p, _tokp, _szp = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_size_t)
SESSION_MAGIC, SEQ_FILE_MAGIC, SESSION_VERSION = b"UBSN", b"UBSS", 1


# ------------------------------------------------------------------ argument helpers (ctypes-permissive)
def _unref(x):
    """ctypes.byref(obj) -> obj (what the C side would see through the pointer)."""
    return getattr(x, "_obj", x) if type(x).__name__ == "CArgObject" else x


def _read_bytes(src, size: int) -> bytes:
    """size bytes from a ctypes array / pointer / byref / address, or a bytes-like object."""
    src = _unref(src)
    if src is None:
        raise ValueError("src is NULL")
    if isinstance(src, (bytes, bytearray, memoryview)):
        mv = memoryview(src).cast("B")
        if len(mv) < size:
            raise ValueError(f"source holds {len(mv)} bytes, {size} asked")
        return bytes(mv[:size])
    if isinstance(src, np.ndarray):
        return src.view(np.uint8).reshape(-1)[:size].tobytes()
    return ctypes.string_at(src, size)


def _write_bytes(dst, data: bytes) -> None:
    dst = _unref(dst)
    if isinstance(dst, (bytearray, memoryview)):
        memoryview(dst).cast("B")[:len(data)] = data
    elif isinstance(dst, np.ndarray):
        dst.view(np.uint8).reshape(-1)[:len(data)] = np.frombuffer(data, np.uint8)
    else:
        ctypes.memmove(dst, data, len(data))


def _tokens_in(tokens, n: int) -> np.ndarray:
    tokens = _unref(tokens)
    if n == 0:
        return np.zeros(0, np.int32)
    if isinstance(tokens, (ctypes.Array, ctypes._Pointer)):
        return np.ctypeslib.as_array(ctypes.cast(tokens, ctypes.POINTER(ctypes.c_int32)), shape=(n,)).copy()
    arr = np.asarray(tokens, dtype=np.int32).reshape(-1)
    if arr.size < n:
        raise ValueError(f"{arr.size} tokens given, n_token_count = {n}")
    return arr[:n].copy()


def _tokens_out(dst, toks: np.ndarray) -> None:
    dst = _unref(dst)
    if not toks.size:
        return
    if isinstance(dst, (ctypes.Array, ctypes._Pointer)):
        np.ctypeslib.as_array(ctypes.cast(dst, ctypes.POINTER(ctypes.c_int32)), shape=(toks.size,))[:] = toks
    elif isinstance(dst, np.ndarray):
        dst.reshape(-1)[:toks.size] = toks
    else:
        dst[:toks.size] = toks.tolist()


def _set_out(ref, value: int) -> None:
    """*ref = value for pointer(c_size_t(...)), byref(c_size_t(...)) or a c_size_t itself."""
    obj = getattr(ref, "_obj", None)            # ctypes.byref's CArgObject
    if obj is not None:
        obj.value = value
    elif isinstance(ref, ctypes._Pointer):
        ref[0] = value
    elif hasattr(ref, "value"):
        ref.value = value
    elif isinstance(ref, list):
        ref[0] = value
    else:
        raise TypeError(f"n_token_count_out: a ctypes pointer or byref(c_size_t) expected, got {type(ref).__name__}")


def _path(p) -> str:
    return os.fsdecode(p if isinstance(p, (bytes, str, os.PathLike)) else bytes(p))


# ------------------------------------------------------------------ whole-context state
@cfunc([_vp], _sz)
def llama_state_get_size(ctx):
    c = _obj(ctx, "context", "llama_state_get_size")
    return 0 if c is None else _state.state_size(c)


@cfunc([_vp, _u8p, _sz], _sz)
def llama_state_get_data(ctx, dst, size):
    c = _obj(ctx, "context", "llama_state_get_data")
    if c is None:
        return 0
    data = _state.get_state(c)
    if len(data) > size:
        _llama_log.error(f"llama_state_get_data: error: the state needs {len(data)} bytes, the buffer holds {size}")
        return 0
    if dst is None:
        _llama_log.error("llama_state_get_data: error: dst is NULL")
        return 0
    _write_bytes(dst, data)
    return len(data)


@cfunc([_vp, _u8p, _sz], _sz)
def llama_state_set_data(ctx, src, size):
    c = _obj(ctx, "context", "llama_state_set_data")
    if c is None:
        return 0
    try:
        return _state.set_state(c, _read_bytes(src, size))
    except (_state.StateError, ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_set_data: error loading state: {e}")
        return 0


@cfunc([_vp, _cp, _tokp, _sz], _b)
def llama_state_save_file(ctx, path_session, tokens, n_token_count):
    c = _obj(ctx, "context", "llama_state_save_file")
    if c is None:
        return False
    try:
        toks = _tokens_in(tokens, n_token_count)
        data = _state.get_state(c)
        with open(_path(path_session), "wb") as f:
            f.write(SESSION_MAGIC + struct.pack("<II", SESSION_VERSION, toks.size) + toks.tobytes() + data)
        return True
    except (OSError, ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_save_file: failed to save session file: {e}")
        return False


def read_session(path: str, magic: bytes = SESSION_MAGIC):
    """(tokens int32[n], state bytes) of a session file (or, magic SEQ_FILE_MAGIC, a sequence state file);
    raises ValueError / OSError."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 12 or blob[:4] != magic:
        raise ValueError(f"{path}: not a ubatch session file")
    version, n = struct.unpack_from("<II", blob, 4)
    if version != SESSION_VERSION:
        raise ValueError(f"{path}: session version {version}, expected {SESSION_VERSION}")
    if 12 + 4 * n > len(blob):
        raise ValueError(f"{path}: truncated token list")
    return np.frombuffer(blob, np.int32, n, 12).copy(), blob[12 + 4 * n:]


@cfunc([_vp, _cp, _tokp, _sz, _szp], _b)
def llama_state_load_file(ctx, path_session, tokens_out, n_token_capacity, n_token_count_out):
    c = _obj(ctx, "context", "llama_state_load_file")
    if c is None:
        return False
    try:
        toks, data = read_session(_path(path_session))
        if toks.size > n_token_capacity:
            _llama_log.error(f"llama_state_load_file: token count in session file exceeded capacity! "
                       f"{toks.size} > {n_token_capacity}")
            return False
        _state.set_state(c, data)
        _tokens_out(tokens_out, toks)
        _set_out(n_token_count_out, int(toks.size))
        return True
    except (OSError, ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_load_file: failed to load session file: {e}")
        return False


# ------------------------------------------------------------------ one sequence
def _seq_flags_ok(flags: int, fn: str) -> bool:
    if flags & 1:
        _llama_log.error(f"{fn}: LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (the sliding-window / recurrent part alone) is not "
                   f"supported by ubatch.llama_cpp")
        return False
    return True                            # LLAMA_STATE_SEQ_FLAGS_ON_DEVICE: the data is in host memory anyway


def _seq_get(ctx, seq_id, fn):
    c = _obj(ctx, "context", fn)
    if c is None:
        return None
    try:
        return _state.seq_get_state(c, seq_id)
    except _state.StateError as e:
        _llama_log.error(f"{fn}: {e}")
        return None


def _seq_set(ctx, data, dest_seq_id, fn) -> int:
    from ubatch.common.errors import KVCacheFullError
    c = _obj(ctx, "context", fn)
    if c is None:
        return 0
    try:
        return _state.seq_set_state(c, data, dest_seq_id)
    except (_state.StateError, KVCacheFullError, MemoryError, ValueError) as e:
        _llama_log.error(f"{fn}: error loading sequence state: {e}")
        return 0


@cfunc([_vp, _i32, _u32], _sz)
def llama_state_seq_get_size_ext(ctx, seq_id, flags):
    if not _seq_flags_ok(flags, "llama_state_seq_get_size"):
        return 0
    data = _seq_get(ctx, seq_id, "llama_state_seq_get_size")
    return 0 if data is None else len(data)


@cfunc([_vp, _u8p, _sz, _i32, _u32], _sz)
def llama_state_seq_get_data_ext(ctx, dst, size, seq_id, flags):
    if not _seq_flags_ok(flags, "llama_state_seq_get_data"):
        return 0
    data = _seq_get(ctx, seq_id, "llama_state_seq_get_data")
    if data is None:
        return 0
    if len(data) > size or dst is None:
        _llama_log.error(f"llama_state_seq_get_data: error: the sequence state needs {len(data)} bytes, the buffer "
                   f"holds {size}")
        return 0
    _write_bytes(dst, data)
    return len(data)


@cfunc([_vp, _u8p, _sz, _i32, _u32], _sz)
def llama_state_seq_set_data_ext(ctx, src, size, dest_seq_id, flags):
    if not _seq_flags_ok(flags, "llama_state_seq_set_data"):
        return 0
    try:
        data = _read_bytes(src, size)
    except (ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_seq_set_data: {e}")
        return 0
    return _seq_set(ctx, data, dest_seq_id, "llama_state_seq_set_data")


@cfunc([_vp, _i32], _sz)
def llama_state_seq_get_size(ctx, seq_id):
    return llama_state_seq_get_size_ext(ctx, seq_id, 0)


@cfunc([_vp, _u8p, _sz, _i32], _sz)
def llama_state_seq_get_data(ctx, dst, size, seq_id):
    return llama_state_seq_get_data_ext(ctx, dst, size, seq_id, 0)


@cfunc([_vp, _u8p, _sz, _i32], _sz)
def llama_state_seq_set_data(ctx, src, size, dest_seq_id):
    return llama_state_seq_set_data_ext(ctx, src, size, dest_seq_id, 0)


@cfunc([_vp, _cp, _i32, _tokp, _sz], _sz)
def llama_state_seq_save_file(ctx, filepath, seq_id, tokens, n_token_count):
    data = _seq_get(ctx, seq_id, "llama_state_seq_save_file")
    if data is None:
        return 0
    try:
        toks = _tokens_in(tokens, n_token_count)
        blob = SEQ_FILE_MAGIC + struct.pack("<II", SESSION_VERSION, toks.size) + toks.tobytes() + data
        with open(_path(filepath), "wb") as f:
            f.write(blob)
        return len(blob)
    except (OSError, ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_seq_save_file: {e}")
        return 0


@cfunc([_vp, _cp, _i32, _tokp, _sz, _szp], _sz)
def llama_state_seq_load_file(ctx, filepath, dest_seq_id, tokens_out, n_token_capacity, n_token_count_out):
    try:
        toks, data = read_session(_path(filepath), SEQ_FILE_MAGIC)
    except (OSError, ValueError, TypeError) as e:
        _llama_log.error(f"llama_state_seq_load_file: {e}")
        return 0
    if toks.size > n_token_capacity:
        _llama_log.error(f"llama_state_seq_load_file: token count in sequence state file exceeded capacity! "
                   f"{toks.size} > {n_token_capacity}")
        return 0
    n = _seq_set(ctx, data, dest_seq_id, "llama_state_seq_load_file")
    if n == 0:
        return 0
    try:
        _tokens_out(tokens_out, toks)
        _set_out(n_token_count_out, int(toks.size))
    except (TypeError, ValueError) as e:
        _llama_log.error(f"llama_state_seq_load_file: {e}")
        return 0
    return 12 + 4 * toks.size + n


# ------------------------------------------------------------------ deprecated names (removed by llama.cpp)
def _dep(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated, use {new}", DeprecationWarning, stacklevel=3)


def llama_get_state_size(ctx):
    _dep("llama_get_state_size", "llama_state_get_size")
    return llama_state_get_size(ctx)


def llama_copy_state_data(ctx, dst):
    _dep("llama_copy_state_data", "llama_state_get_data")
    return llama_state_get_data(ctx, dst, 1 << 62)


def llama_set_state_data(ctx, src):
    _dep("llama_set_state_data", "llama_state_set_data")
    return llama_state_set_data(ctx, src, ctypes.sizeof(src) if isinstance(src, ctypes.Array) else len(src))


def llama_load_session_file(ctx, path_session, tokens_out, n_token_capacity, n_token_count_out):
    _dep("llama_load_session_file", "llama_state_load_file")
    return llama_state_load_file(ctx, path_session, tokens_out, n_token_capacity, n_token_count_out)


def llama_save_session_file(ctx, path_session, tokens, n_token_count):
    _dep("llama_save_session_file", "llama_state_save_file")
    return llama_state_save_file(ctx, path_session, tokens, n_token_count)


__all__ = [n for n in list(globals()) if n.startswith("llama_")]
