"""The i-quant, ternary and MXFP4 weight types (IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S,
IQ1_M, TQ1_0, TQ2_0, MXFP4): dequantisation bit-exact against gguf.quants.dequantize on many random blocks, the
lookup tables the kernels get (built from gguf.quants, checked by C), the activation kind each type meets
(ggml-cpu's vec_dot_type), and the types still unsupported named in every error. (The matmul, invariance and
back-end tests of test_matmul.py / test_backends.py cover these types too: support/matmul_ref.ALL_TYPES lists them.)"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from ubatch._ffi import ffi, lib
from ubatch.compute import iq_tables
from ubatch.compute import matmul as mm
from matmul_ref import random_weight

NEW = [T.IQ4_NL, T.IQ4_XS, T.IQ3_S, T.IQ3_XXS, T.IQ2_S, T.IQ2_XS, T.IQ2_XXS, T.IQ1_S, T.IQ1_M, T.TQ1_0,
       T.TQ2_0, T.MXFP4]
# ggml-cpu's vec_dot_type of each (ggml-cpu.c type_traits_cpu): what the activations become
ACT_KIND = {T.IQ4_NL: "q8_0", T.MXFP4: "q8_0"}


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
def test_dequantisation_bit_exact_against_gguf(t):
    """get_rows of 64 rows x 4 blocks (random bytes, valid f16 scales incl. zero / subnormal / negative, blocks of
    all 0x00 / 0xFF) gives exactly gguf.quants.dequantize's float32 values."""
    rng = np.random.default_rng(1000 + int(t))
    blck = mm.type_info(int(t))[0]
    n_rows, k = 64, 4 * blck
    data = random_weight(t, n_rows, k, rng)
    w = mm.QWeight(int(t), n_rows, k, data)
    got = mm.get_rows(w, np.arange(n_rows, dtype=np.int32))
    want = dequantize(data.reshape(n_rows, -1), t).reshape(n_rows, k)
    assert want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
def test_every_block_value_reachable(t):
    """Each type's blocks of one repeated byte (0x00..0xFF) with a unit scale: the dequantised values are
    gguf's (covers every nibble / grid index / sign pattern that a single byte spells)."""
    blck, nb = mm.type_info(int(t))
    rows = np.repeat(np.arange(256, dtype=np.uint8)[:, None], nb, axis=1)
    if t == T.MXFP4:
        rows[:, 0] = 127                                    # 2^-1
    elif t == T.IQ1_M:
        pass                                                # its scale is spread over the repeated bytes
    else:
        off = {T.TQ1_0: 52, T.TQ2_0: 64}.get(t, 0)
        rows[:, off:off + 2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    data = np.ascontiguousarray(rows).reshape(-1)
    w = mm.QWeight(int(t), 256, blck, data)
    got = mm.get_rows(w, np.arange(256, dtype=np.int32))
    np.testing.assert_array_equal(got, dequantize(rows, t).reshape(256, blck))


def test_tables_come_from_gguf_and_are_checked():
    from gguf import quants as q
    t = iq_tables.build()
    assert t["kv"].tolist() == list(q.IQ4_NL.kvalues)
    for name, cls, n, per in (("iq2xxs", q.IQ2_XXS, 256, 8), ("iq2xs", q.IQ2_XS, 512, 8), ("iq2s", q.IQ2_S, 1024, 8),
                              ("iq3xxs", q.IQ3_XXS, 256, 4), ("iq3s", q.IQ3_S, 512, 4), ("iq1s", q.IQ1_S, 2048, 8)):
        cls.init_grid()
        assert t[name].shape == (n, per)
        np.testing.assert_array_equal(t[name].astype(np.float32), cls.grid.reshape(n, per))
        assert len({r.tobytes() for r in t[name]}) == n
    iq_tables.ensure()

    def call(tab):
        c = {k: ffi.from_buffer("int8_t[]" if v.dtype == np.int8 else "uint8_t[]", v) for k, v in tab.items()}
        return lib.ub_mm_set_iq_tables(c["kv"], c["iq2xxs"], c["iq2xs"], c["iq2s"], c["iq3xxs"], c["iq3s"], c["iq1s"])
    for name, bad in (("kv", 5), ("iq2s", 9), ("iq3xxs", 60), ("iq3s", 2), ("iq1s", 2)):
        tab = {k: v.copy() for k, v in t.items()}
        tab[name].flat[7] = bad                             # a value outside the format's set (kv: not increasing)
        assert call(tab) == lib.UB_E_ARG, name
    # refused tables changed nothing: the kernels still give gguf's values
    data = random_weight(T.IQ2_S, 4, 256, np.random.default_rng(3))
    np.testing.assert_array_equal(mm.get_rows(mm.QWeight(int(T.IQ2_S), 4, 256, data), np.arange(4, dtype=np.int32)),
                                  dequantize(data.reshape(4, -1), T.IQ2_S))
    assert call(t) == lib.UB_OK


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
def test_activation_kind_is_ggmls(t):
    """IQ4_NL and MXFP4 meet Q8_0 activations, the 256-element types Q8_K (ggml-cpu's vec_dot_type): the bytes
    per activation row say which."""
    k = 512
    kind = ACT_KIND.get(t, "q8_k")
    want = (k // 32) * (4 + 32) if kind == "q8_0" else (k // 256) * (4 + 256 + 32)
    assert lib.ub_mm_act_bytes(int(t), k) == want


def test_unsupported_types_are_named():
    from ubatch.model.gguf_file import GGML_TYPES, type_name
    for v, name in ((15, "Q8_K"), (9, "Q8_1"), (24, "I8"), (28, "F64")):
        assert v not in GGML_TYPES and type_name(v) == name
        with pytest.raises(ValueError, match=rf"unsupported ggml type {v} \({name}\)"):
            mm.QWeight(v, 1, 256, np.zeros(1024, np.uint8))
    assert type_name(42) == "Q2_0" and type_name(77) == "type 77" and 42 in GGML_TYPES
    for t in NEW:
        assert GGML_TYPES[int(t)][0] == t.name and mm.TYPE_NAMES[int(t)] == t.name


def test_unsupported_type_in_a_gguf_file_is_named(tmp_path):
    import gguf
    from ubatch.model.gguf_file import GGUFError, GGUFFile
    path = tmp_path / "q8_k.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((4, 292), np.uint8), raw_shape=(4, 292), raw_dtype=T.Q8_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=r"'blk.0.attn_q.weight' has unsupported type Q8_K"):
        GGUFFile(str(path))


def test_model_lists_the_supported_types():
    import ubatch.model as um
    assert set(um.SUPPORTED_TYPES) == set(mm.TYPE_NAMES.values())
    for t in NEW:
        assert t.name in um.SUPPORTED_TYPES
