"""Matmul of float32 activations by GGUF weights kept in their block layout (C kernels, csrc/compute/).

    w = QWeight(ggml_type, n_rows, n_cols, data)   # data: the tensor's bytes (uint8, kept, never copied)
    y = matmul(x, w)                               # x float32[n, n_cols] -> float32[n, n_rows] = x @ W.T
    rows = get_rows(w, ids)                        # ids int32[m] -> float32[m, n_cols] (dequantised rows)

Activations are quantised per row as ggml-cpu does for the weight type (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/
MXFP4/NVFP4/Q1_0/Q2_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants, IQ4_XS, IQ3_*, IQ2_*, IQ1_* and TQ*_0, f16/bf16/f32 for
the float types), then integer dot products per block. y[i] depends only on x[i] and w, bitwise: whatever the number of rows, the thread count or the call
(csrc/compute/matmul.c says how). The back-end (avx512, avxvnni, avx2 or plain C) is chosen at run time
from the CPU; UBATCH_KERNELS=<name> forces one, ``set_backend`` switches it (tests, benchmarks),
``backends()`` lists what this CPU has (ubatch.compute.backends).

Repacking: a QWeight of a type with a panel layout (IQ4_NL, IQ4_XS, Q4_K, Q6_K, Q5_0: ``repack_rows(t)`` > 0) is converted
once, at construction, into C-owned interleaved panels (csrc/compute/repack.c; docs/kernels.md "Repacked panels"),
which the kernels then read instead of the GGUF bytes; when ``data`` is a read-only file map its pages are
released after the conversion (the resident memory stays about the file's). ``UBATCH_REPACK=0``,
``set_repack(False)`` or ``QWeight(..., repack=False)`` keep the GGUF layout.
"""
from __future__ import annotations

from typing import Optional

import os

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute import iq_tables
from ubatch.compute.backends import active_backend, backends, set_backend
from ubatch.compute.kernels import default_threads

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30
IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M = 16, 17, 18, 19, 20, 21, 22, 23, 29
TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0 = 34, 35, 39, 40, 41, 42
TYPE_NAMES = {F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1",
              Q8_0: "Q8_0", Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K",
              IQ4_NL: "IQ4_NL", IQ4_XS: "IQ4_XS", IQ3_S: "IQ3_S", IQ3_XXS: "IQ3_XXS", IQ2_S: "IQ2_S",
              IQ2_XS: "IQ2_XS", IQ2_XXS: "IQ2_XXS", IQ1_S: "IQ1_S", IQ1_M: "IQ1_M", TQ1_0: "TQ1_0",
              TQ2_0: "TQ2_0", MXFP4: "MXFP4", NVFP4: "NVFP4",
              Q1_0: "Q1_0", Q2_0: "Q2_0"}
_NATIVE_DTYPES = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16)}


def _other_name(v: int) -> str:
    """ " (NAME)" for a ggml type the gguf package names (an unsupported one: Q8_K, NVFP4, I8, ...), else ""."""
    try:
        from gguf import GGMLQuantizationType
        return f" ({GGMLQuantizationType(v).name})"
    except (ImportError, ValueError):
        return ""


def type_info(ggml_type: int) -> tuple:
    """(elements per block, bytes per block) of a supported weight type; ValueError naming it otherwise."""
    blck, nbytes = ffi.new("int32_t *"), ffi.new("int32_t *")
    ok = not isinstance(ggml_type, bool) and isinstance(ggml_type, (int, np.integer)) and \
        lib.ub_mm_type_info(int(ggml_type), blck, nbytes)
    if not ok:
        what = repr(ggml_type)
        if isinstance(ggml_type, (int, np.integer)) and not isinstance(ggml_type, bool):
            what = f"{int(ggml_type)}{_other_name(int(ggml_type))}"
        raise ValueError(f"unsupported ggml type {what} (supported: "
                         f"{', '.join(f'{n}={v}' for v, n in sorted(TYPE_NAMES.items()))})")
    if ok == 2:  # an i-quant whose lookup tables are not set yet
        iq_tables.ensure()
    return int(blck[0]), int(nbytes[0])


def backend() -> str:
    """The kernel back-end in use: "generic", "avx2", "avxvnni" or "avx512" (= backends.active_backend)."""
    return active_backend()


_repack: Optional[bool] = None


def set_repack(on: Optional[bool]) -> None:
    """Repack the QWeights made from now on (True), keep their GGUF layout (False), or follow UBATCH_REPACK
    again (None; default on). Weights already made keep their form."""
    global _repack
    _repack = None if on is None else bool(on)


def repack_enabled() -> bool:
    """Whether a new QWeight of an eligible type is repacked (set_repack, else UBATCH_REPACK != "0")."""
    return _repack if _repack is not None else os.environ.get("UBATCH_REPACK", "1") != "0"


def repack_rows(ggml_type: int) -> int:
    """Rows per panel of ggml_type's repacked layout, 0 when it has none (then it is never repacked)."""
    return int(lib.ub_rp_panel_rows(int(ggml_type)))




def _read_only_file_map(a: np.ndarray) -> bool:
    """True when a's memory is a read-only file mapping (np.memmap mode "r"): its pages may be dropped and
    are read back from the file when touched again. Anonymous memory never (dropping would zero it)."""
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap) and getattr(a, "_mmap", None) is not None:
            return getattr(a, "mode", None) == "r"
        a = a.base
    return False


def _threads(n_threads: Optional[int]) -> int:
    nt = default_threads() if n_threads is None else n_threads
    if isinstance(nt, bool) or not isinstance(nt, (int, np.integer)) or nt < 1:
        raise ValueError(f"n_threads must be an int >= 1, got {n_threads!r}")
    return int(nt)


class QWeight:
    """A weight matrix [n_rows, n_cols] = [out, in] stored as GGUF blocks of ``ggml_type`` (GGUF ne =
    (n_cols, n_rows)). ``data`` is kept as given (a memmap slice stays a memmap): uint8 bytes, or for
    F32 / F16 / BF16 also a float32 / float16 / uint16 array of the same bytes."""

    __slots__ = ("ggml_type", "n_rows", "n_cols", "data", "block_size", "block_bytes", "nbytes", "_buf", "_rp",
                 "c_buf", "c_type", "dropped_bytes")

    def __init__(self, ggml_type: int, n_rows: int, n_cols: int, data: np.ndarray, *,
                 repack: Optional[bool] = None) -> None:
        blck, bb = type_info(ggml_type)
        for name, v in (("n_rows", n_rows), ("n_cols", n_cols)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if name == "n_rows" else 1):
                raise ValueError(f"QWeight {name} must be an int >= {0 if name == 'n_rows' else 1}, got {v!r}")
        n_rows, n_cols = int(n_rows), int(n_cols)
        tname = TYPE_NAMES[int(ggml_type)]
        if n_cols % blck:
            raise ValueError(f"QWeight n_cols={n_cols} is not a multiple of the {tname} block size {blck}")
        if not isinstance(data, np.ndarray):
            raise ValueError(f"QWeight data must be a numpy array, got {type(data).__name__}")
        if data.dtype != np.uint8 and data.dtype != _NATIVE_DTYPES.get(int(ggml_type)):
            raise ValueError(f"QWeight data for {tname} must be uint8 bytes"
                             f"{' or ' + _NATIVE_DTYPES[int(ggml_type)].name if int(ggml_type) in _NATIVE_DTYPES else ''}"
                             f", got dtype {data.dtype}")
        if not data.flags.c_contiguous:
            raise ValueError("QWeight data must be C-contiguous")
        need = n_rows * (n_cols // blck) * bb
        if data.nbytes != need:
            raise ValueError(f"QWeight data has {data.nbytes} bytes, {tname} [{n_rows}, {n_cols}] needs {need}")
        self.ggml_type, self.n_rows, self.n_cols, self.data = int(ggml_type), n_rows, n_cols, data
        self.block_size, self.block_bytes, self.nbytes = blck, bb, need
        self._buf = ffi.from_buffer("uint8_t[]", data) if need else ffi.NULL
        # what the C calls take: the GGUF bytes, or the repacked panels (type | UB_MM_REPACKED)
        self._rp, self.c_buf, self.c_type, self.dropped_bytes = None, self._buf, self.ggml_type, 0
        if (repack_enabled() if repack is None else repack) and 0 < repack_rows(ggml_type) <= n_rows:
            rp = lib.ub_rp_new(self._buf, need, self.ggml_type, n_rows, n_cols, int(_read_only_file_map(data)))
            if rp == ffi.NULL:
                raise MemoryError(f"QWeight: out of memory repacking {tname} [{n_rows}, {n_cols}]")
            self._rp = ffi.gc(rp, lib.ub_rp_free, size=int(lib.ub_rp_bytes(rp)))
            self.c_buf = ffi.cast("uint8_t *", self._rp)
            self.c_type = self.ggml_type | lib.UB_MM_REPACKED
            self.dropped_bytes = int(lib.ub_rp_dropped(rp))

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.ggml_type]

    @property
    def repacked(self) -> bool:
        """True when the kernels read this weight's C-owned panels (repack.c) instead of its GGUF bytes."""
        return self._rp is not None

    def unpacked_bytes(self) -> np.ndarray:
        """The GGUF bytes rebuilt from the panels (uint8[nbytes]; the round trip the tests check)."""
        if self._rp is None:
            return np.frombuffer(self.data.tobytes(), np.uint8)
        out = np.empty(self.nbytes, np.uint8)
        if lib.ub_rp_unpack(self._rp, ffi.from_buffer("uint8_t[]", out), self.nbytes) != lib.UB_OK:
            raise ValueError(f"unpacked_bytes: invalid repacked weight {self!r}")
        return out

    @property
    def shape(self) -> tuple:
        return (self.n_rows, self.n_cols)

    def __repr__(self) -> str:
        return f"QWeight({self.type_name}, n_rows={self.n_rows}, n_cols={self.n_cols})"


def _check_weight(w) -> None:
    if not isinstance(w, QWeight):
        raise ValueError(f"w must be a QWeight, got {type(w).__name__}")


def matmul(x: np.ndarray, w: QWeight, *, out: Optional[np.ndarray] = None,
           n_threads: Optional[int] = None) -> np.ndarray:
    """y = x @ W.T: x float32[n, n_cols] (or [n_cols]) C-contiguous -> float32[n, n_rows] (or [n_rows])."""
    _check_weight(w)
    if not isinstance(x, np.ndarray):
        raise ValueError(f"x must be a numpy array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise ValueError(f"x must have dtype float32, got {x.dtype}")
    if x.ndim not in (1, 2) or x.shape[-1] != w.n_cols:
        raise ValueError(f"x must have shape [n, {w.n_cols}] (the weight's n_cols), got {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous")
    n = 1 if x.ndim == 1 else x.shape[0]
    shape = (w.n_rows,) if x.ndim == 1 else (n, w.n_rows)
    if out is None:
        out = np.empty(shape, np.float32)
    elif not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writeable C-contiguous float32 array of shape {shape}")
    nt = _threads(n_threads)
    if n == 0 or w.n_rows == 0:
        return out
    rc = lib.ub_matmul(ffi.from_buffer("float[]", x), n, w.n_cols, w.c_buf, w.nbytes, w.c_type, w.n_rows,
                       ffi.from_buffer("float[]", out), nt)
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("matmul: out of memory for the quantised activations")
    if rc != lib.UB_OK:
        raise ValueError(f"matmul: invalid arguments for {w!r} (status {rc})")
    return out


def matmul_multi(x: np.ndarray, ws, *, n_threads: Optional[int] = None) -> list:
    """[x @ W.T for W in ws] for 1..4 weights of the same n_cols, in one C call (ub_matmul_multi): x is
    quantised once per distinct activation kind and the weights' columns are one job for the threads.
    Each result is bitwise matmul(x, W) (x float32[n, n_cols] C-contiguous -> float32[n, W.n_rows])."""
    ws = list(ws)
    if not 1 <= len(ws) <= lib.UB_MM_MAXW:
        raise ValueError(f"matmul_multi takes 1 to {lib.UB_MM_MAXW} weights, got {len(ws)}")
    for i, w in enumerate(ws):
        if not isinstance(w, QWeight):
            raise ValueError(f"ws[{i}] must be a QWeight, got {type(w).__name__}")
        if w.n_cols != ws[0].n_cols:
            raise ValueError(f"ws[{i}] has n_cols={w.n_cols}, ws[0] has {ws[0].n_cols}: the weights must share the input")
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError("x must be a C-contiguous float32 array [n, n_cols]")
    if x.shape[1] != ws[0].n_cols:
        raise ValueError(f"x must have shape [n, {ws[0].n_cols}] (the weights' n_cols), got {x.shape}")
    nt = _threads(n_threads)
    outs = [np.empty((x.shape[0], w.n_rows), np.float32) for w in ws]
    if x.shape[0] == 0:
        return outs
    nw = len(ws)
    rc = lib.ub_matmul_multi(ffi.from_buffer("float[]", x), x.shape[0], ws[0].n_cols, nw,
                             ffi.new("uint8_t *[]", [w.c_buf for w in ws]), ffi.new("int64_t[]", [w.nbytes for w in ws]),
                             ffi.new("int32_t[]", [w.c_type for w in ws]), ffi.new("int64_t[]", [w.n_rows for w in ws]),
                             ffi.new("float *[]", [ffi.from_buffer("float[]", o) if o.size else ffi.NULL for o in outs]),
                             nt)
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("matmul_multi: out of memory for the quantised activations")
    if rc != lib.UB_OK:
        raise ValueError(f"matmul_multi: invalid arguments for {ws!r} (status {rc})")
    return outs


def get_rows(w: QWeight, ids: np.ndarray) -> np.ndarray:
    """Dequantised rows: ids int32[m] (each in [0, n_rows)) -> float32[m, n_cols]."""
    _check_weight(w)
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int32 or ids.ndim != 1:
        raise ValueError(f"ids must be a 1-D int32 numpy array, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} {getattr(ids, 'shape', '')}")
    ids = np.ascontiguousarray(ids)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= w.n_rows):
        bad = ids[(ids < 0) | (ids >= w.n_rows)][0]
        raise ValueError(f"get_rows: id {int(bad)} out of range [0, {w.n_rows})")
    out = np.empty((ids.size, w.n_cols), np.float32)
    if ids.size == 0:
        return out
    rc = lib.ub_get_rows(w.c_buf, w.nbytes, w.c_type, w.n_rows, w.n_cols, ffi.from_buffer("int32_t[]", ids),
                         ids.size, ffi.from_buffer("float[]", out))
    if rc != lib.UB_OK:
        raise ValueError(f"get_rows: invalid arguments for {w!r} (status {rc})")
    return out


def quantize_activations(x: np.ndarray, ggml_type: int) -> np.ndarray:
    """The bytes ub_matmul makes of one activation row for a weight type (for tests): x float32[k] -> uint8.
    Layout per block: Q8_0 {f32 d; i8 qs[32]}, Q8_1 {f32 d; f32 s; i8 qs[32]}, Q8_K {f32 d; i8 qs[256];
    i16 bsums[16]}; f16/bf16 bits; f32 as is."""
    type_info(ggml_type)
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 1:
        raise ValueError("x must be a 1-D float32 numpy array")
    x = np.ascontiguousarray(x)
    nbytes = lib.ub_mm_act_bytes(int(ggml_type), x.size)
    if nbytes < 0:
        raise ValueError(f"x length {x.size} does not fit the activation blocks of {TYPE_NAMES[int(ggml_type)]}")
    out = np.empty(nbytes, np.uint8)
    rc = lib.ub_mm_quantize_act(ffi.from_buffer("float[]", x), x.size, int(ggml_type), ffi.from_buffer("uint8_t[]", out))
    if rc != lib.UB_OK:
        raise ValueError(f"quantize_activations: invalid arguments (status {rc})")
    return out


__all__ = ["QWeight", "matmul", "matmul_multi", "get_rows", "type_info", "backend", "backends", "set_backend", "quantize_activations",
           "set_repack", "repack_enabled", "repack_rows",
           "TYPE_NAMES"] + list(TYPE_NAMES.values())
