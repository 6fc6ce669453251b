"""llama_model_quantize over ubatch: a GGUF file re-written with its weights in another type, with llama.cpp's
rules for which tensors are quantised and to what (a tied or separate output matrix gets Q6_K unless its rows
are not a multiple of 256, then Q8_0; norms, 1-D tensors and a list of small tensors stay as they are), its
file layout (the source's metadata in order, general.quantization_version and general.file_type moved to the
end, tensors sorted by layer then name, data aligned) and its rounding (ggml's reference quantisers, C:
csrc/compute/kv_quant.c; dequantisation of a quantised source by ubatch's row kernels, csrc/compute/).

The file types whose every tensor ubatch can write: ALL_F32 (0), MOSTLY_F16 (1), MOSTLY_Q4_0 (2), MOSTLY_Q4_1
(3), MOSTLY_Q8_0 (7), MOSTLY_Q5_0 (8), MOSTLY_Q5_1 (9), MOSTLY_BF16 (32). Any other file type, or a tensor whose
chosen type is one ubatch cannot write (a Q6_K output matrix with rows a multiple of 256), fails naming the type
before anything is written. The output appears only when complete (written to a temporary file, renamed)."""
from __future__ import annotations

import os
import struct
import tempfile
from typing import Dict, List, Tuple

import numpy as np

from ubatch.compute import kv_quant
from ubatch.compute import matmul as mm

F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K = mm.F32, mm.F16, mm.BF16, mm.Q4_0, mm.Q4_1, mm.Q5_0, \
    mm.Q5_1, mm.Q8_0, mm.Q6_K
# llama_ftype -> the ggml type of its default tensors (llama.h)
FTYPE_TYPES: Dict[int, int] = {0: F32, 1: F16, 2: Q4_0, 3: Q4_1, 7: Q8_0, 8: Q5_0, 9: Q5_1, 32: BF16}
# ggml types ubatch writes (kv_quant's codecs: ggml's reference rounding)
WRITABLE: Dict[int, str] = {F32: "f32", F16: "f16", BF16: "bf16", Q8_0: "q8_0", Q4_0: "q4_0", Q4_1: "q4_1",
                            Q5_0: "q5_0", Q5_1: "q5_1"}
FLOAT_TYPES = (F32, F16, BF16)
GGML_TYPE_COUNT = 43
GGML_QNT_VERSION = 2
_GGUF_UINT32 = 4

# tensors llama.cpp's quantiser never quantises (substrings of the name; small or precision-critical)
_KEEP = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
         "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
         "indexer.q_proj.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_",
         ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd") + tuple(
    f"time_mix_{s}.weight" for s in ("first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2", "g1", "g2",
                                     "decay_w1", "decay_w2", "lerp_fused"))
_KEEP_EXACT = ("position_embd.weight", "token_types.weight")


class QuantizeError(ValueError):
    """Why a file cannot be quantised (the message names the tensor, type or parameter)."""


def _type_name(t: int) -> str:
    return mm.TYPE_NAMES.get(t, f"type {t}")


def _block(t: int) -> int:
    if t in FLOAT_TYPES:
        return 1
    return 256 if t == Q6_K else 32


def _quantisable(name: str, n_dims: int, params) -> bool:
    if params.only_copy or n_dims < 2 or not name.endswith("weight"):
        return False
    if name == "output.weight" and not params.quantize_output_tensor:
        return False
    return name not in _KEEP_EXACT and not any(k in name for k in _KEEP)


def _fallback(name: str, ncols: int, t: int) -> int:
    """llama.cpp's type for a tensor whose rows do not fit t's block (for the types ubatch can meet here)."""
    if ncols % _block(t) == 0:
        return t
    if t != Q6_K:
        raise QuantizeError(f"{name}: {ncols} columns do not fit the blocks of {_type_name(t)} (32) and "
                            f"llama.cpp defines no fallback for {_type_name(t)}")
    return Q8_0 if ncols % 32 == 0 else F16


def choose_type(name: str, ne: Tuple[int, ...], src_type: int, default: int, params, tied: bool, arch: str) -> int:
    """The type llama.cpp's quantiser gives tensor `name` (ne: GGUF dims, ne[0] = row length)."""
    if not _quantisable(name, len(ne), params):
        return src_type
    is_embd = name in ("token_embd.weight", "per_layer_token_embd.weight")
    is_out = name == "output.weight"
    if params.token_embedding_type < GGML_TYPE_COUNT and is_embd:
        return int(params.token_embedding_type)
    if params.output_tensor_type < GGML_TYPE_COUNT and is_out:
        return int(params.output_tensor_type)
    t = default
    if t in FLOAT_TYPES:
        return t
    if not params.pure and (is_out or (tied and is_embd)):
        if arch == "falcon" or ne[0] % _block(t) != 0:
            t = Q8_0
        elif t != Q8_0:
            t = Q6_K
    return _fallback(name, int(ne[0]), t)


def _row_bytes(t: int, ncols: int) -> int:
    if t == F32:
        return 4 * ncols
    if t in (F16, BF16):
        return 2 * ncols
    return kv_quant.row_bytes(WRITABLE[t], ncols)


def _float_rows(t, n_rows: int, ncols: int) -> np.ndarray:
    """A source tensor's values as float32[n_rows, ncols] (ggml's conversions: f16 / bf16 widened exactly,
    quantised blocks by ubatch's dequantising row kernel)."""
    raw = t.data
    st = t.ggml_type
    if st == F32:
        return raw.view(np.float32).reshape(n_rows, ncols)
    if st == F16:
        return raw.view(np.float16).astype(np.float32).reshape(n_rows, ncols)
    if st == BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(n_rows, ncols)
    w = mm.QWeight(st, n_rows, ncols, raw)
    return mm.get_rows(w, np.arange(n_rows, dtype=np.int32))


def _encode(t, new: int, n_rows: int, ncols: int) -> np.ndarray:
    x = np.ascontiguousarray(_float_rows(t, n_rows, ncols), np.float32)
    if new == F32:
        return x.view(np.uint8).reshape(-1)
    return kv_quant.quantize_rows(WRITABLE[new], x).reshape(-1)


def _sort_key(name: str):
    """llama.cpp's loader order: tensors outside the blocks first, then by block number, each by name."""
    if name.startswith("blk."):
        head = name[4:].split(".", 1)[0]
        if head.isdigit():
            return (int(head), name.encode())
    return (-1, name.encode())


def _gguf_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv_u32(key: str, v: int) -> bytes:
    return _gguf_str(key) + struct.pack("<II", _GGUF_UINT32, v)


def _plan(gf, params):
    """Per tensor (sorted): (tensor, new type, n_rows, ncols, nbytes); the output ftype. Raises QuantizeError."""
    ftype = int(params.ftype)
    arch = str(gf.metadata.get("general.architecture", ""))
    if params.only_copy:
        ftype = int(gf.metadata.get("general.file_type", ftype))
        default = F32
    elif ftype not in FTYPE_TYPES:
        raise QuantizeError(f"ftype {ftype}: ubatch writes the file types ALL_F32 (0), MOSTLY_F16 (1), "
                            f"MOSTLY_Q4_0 (2), MOSTLY_Q4_1 (3), MOSTLY_Q8_0 (7), MOSTLY_Q5_0 (8), MOSTLY_Q5_1 (9) "
                            f"and MOSTLY_BF16 (32); the k-quant / i-quant mixes need quantisers it does not have")
    else:
        default = FTYPE_TYPES[ftype]
    tied = "output.weight" not in gf.tensors
    plan = []
    for t in sorted(gf.tensors.values(), key=lambda t: _sort_key(t.name)):
        ne = tuple(int(d) for d in t.ne)
        st = t.ggml_type
        new = choose_type(t.name, ne, st, default, params, tied, arch)
        ncols = ne[0]
        n_rows = t.n_rows
        if new == st:
            nbytes = int(t.nbytes)
        else:
            if st not in FLOAT_TYPES and not params.allow_requantize:
                raise QuantizeError(f"{t.name}: requantizing from type {_type_name(st)} is disabled "
                                    f"(allow_requantize)")
            if new not in WRITABLE:
                raise QuantizeError(f"{t.name}: llama.cpp's rules give it type {_type_name(new)}, which ubatch "
                                    f"cannot write (it writes {', '.join(_type_name(k) for k in WRITABLE)}); "
                                    f"set output_tensor_type / token_embedding_type or pure=True")
            if st not in FLOAT_TYPES and st not in mm.TYPE_NAMES:
                raise QuantizeError(f"{t.name}: ubatch cannot dequantise source type {_type_name(st)}")
            nbytes = n_rows * _row_bytes(new, ncols)
        plan.append((t, new, n_rows, ncols, nbytes))
    return plan, ftype


def quantize(src: str, dst: str, params) -> None:
    """Writes dst from src as llama_model_quantize does (params: a llama_model_quantize_params)."""
    from ubatch.model.gguf_file import GGUFFile
    for field in ("imatrix", "kv_overrides", "tt_overrides"):
        if getattr(params, field, None):
            raise QuantizeError(f"{field}: not supported by ubatch's quantiser (importance matrices and "
                                f"metadata / tensor-type overrides)")
    if getattr(params, "prune_layers", None):
        raise QuantizeError("prune_layers: not supported by ubatch's quantiser")
    try:
        gf = GGUFFile(src)
    except (OSError, ValueError) as e:
        raise QuantizeError(f"{src}: {e}") from None
    if "split.count" in gf.metadata:
        raise QuantizeError(f"{src}: a split GGUF (split.count): ubatch's quantiser reads single files")
    plan, ftype = _plan(gf, params)
    align = int(gf.metadata.get("general.alignment", 32))
    kvs: List[bytes] = [bytes(gf._map[a:b]) for k, (a, b) in gf.kv_spans.items()
                        if k not in ("general.quantization_version", "general.file_type")]
    kvs += [_kv_u32("general.quantization_version", GGML_QNT_VERSION), _kv_u32("general.file_type", ftype)]
    infos, off = [], 0
    for t, new, n_rows, ncols, nbytes in plan:
        ne = [int(d) for d in t.ne]
        infos.append(_gguf_str(t.name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}q", *ne)
                     + struct.pack("<IQ", new, off))
        off += -(-nbytes // align) * align
    head = b"GGUF" + struct.pack("<Iqq", 3, len(plan), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % align)
    if getattr(params, "dry_run", False):
        return
    fd, tmp = tempfile.mkstemp(prefix=".ubatch-quant-", dir=os.path.dirname(os.path.abspath(dst)) or ".")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(head)
            for t, new, n_rows, ncols, nbytes in plan:
                data = t.data if new == t.ggml_type else _encode(t, new, n_rows, ncols)
                if data.nbytes != nbytes:
                    raise QuantizeError(f"{t.name}: {data.nbytes} bytes written, {nbytes} planned")
                out.write(memoryview(np.ascontiguousarray(data)))
                out.write(b"\0" * (-nbytes % align))
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
