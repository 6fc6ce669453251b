"""The dense architectures (llama with every rope scaling, qwen3, phi3, granite, olmo2,
minicpm, smollm3) on tiny random-weight GGUFs (tests/model/arch_gguf.py) against llama.cpp's logits recorded by
tests/model/record_arch_dense.py (tests/data/arch_dense, llama-cpp-python 0.3.36).

The agreement rule is the real models' (tests/support/realmodel_replay.py), with llama.cpp's own spread measured
between its recorded configurations of the same rows (n_ubatch 512 / 2 threads, n_ubatch 1 / 1 thread, and
n_ubatch 7 with flash attention):
* S = the largest |logit difference| between configuration 0 and another configuration, over all rows;
* M = max(0.2, the largest change of a row's top-1/top-2 margin between two configurations);
* rows whose margin is >= M in every configuration: ubatch's argmax equals llama.cpp's;
* every row's max |ubatch - llama.cpp| <= S.
Each feature is also shown to matter: the same model with the feature turned off breaks the rule."""
from __future__ import annotations

import copy
import dataclasses
import json
import os

import numpy as np
import pytest

import ubatch
from ubatch import Batch
from ubatch.model import fused
from ubatch.model import GGUFError, SUPPORTED_ARCHS

import arch_gguf
from invariance_driver import others_for, run_target

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "arch_dense")
with open(os.path.join(DATA, "index.json")) as _f:
    INDEX = json.load(_f)
RUNS = sorted(INDEX)
_MODELS: dict = {}


def model_of(variant: str, tmp_path_factory) -> ubatch.Model:
    if variant not in _MODELS:
        path = arch_gguf.write(tmp_path_factory.mktemp("arch") / f"{variant}.gguf", variant)
        want = next(e["gguf_sha256"] for e in INDEX.values() if e["variant"] == variant)
        if arch_gguf.sha256(path) != want:
            pytest.fail(f"{variant}: the gguf package wrote other bytes than the recorded file (sha256 "
                        f"{arch_gguf.sha256(path)[:12]} != {want[:12]}): re-record with tests/model/record_arch_dense.py")
        _MODELS[variant] = ubatch.Model.from_gguf(path)
    return _MODELS[variant]


def recording(run: str):
    return INDEX[run], np.load(os.path.join(DATA, run + ".npz"))


def ubatch_rows(m, run: str, n_ubatch: int = 512, n_threads: int = 2) -> np.ndarray:
    """The recorded rows through ubatch.Context: the prompt in one call (logits on every row), then the
    recorded greedy tokens one at a time."""
    e, z = recording(run)
    ctx = ubatch.Context(m, n_ctx=e["n_ctx"], n_batch=512, n_ubatch=n_ubatch, n_seq_max=1, n_threads=n_threads,
                         type_k="f32", type_v="f32")
    pr = z["prompt"].tolist()
    n = len(pr)
    assert ctx.decode(Batch.from_arrays(tokens=pr, pos=list(range(n)), seq_ids=[[0]] * n, output=[1] * n)) == 0
    rows = [ctx.get_logits_ith(i).copy() for i in range(n)]
    for g, t in enumerate(z["greedy"].tolist()):
        assert ctx.decode(Batch.from_arrays(tokens=[t], pos=[n + g], seq_ids=[[0]], output=[1])) == 0
        rows.append(ctx.get_logits_ith(0).copy())
    return np.array(rows)


def _margin(row: np.ndarray, ids) -> float:
    return float(row[ids[0]] - row[ids[1]])


def rule(run: str):
    """(S, M, clear rows mask, llama.cpp configuration 0's logits) of a recording."""
    e, z = recording(run)
    confs = [z[f"c{i}_logits"] for i in range(len(e["configs"]))]
    ref = confs[0]
    spread = max(float(np.abs(c - ref).max()) for c in confs[1:])
    motion = 0.0
    clear = np.ones(len(ref), dtype=bool)
    for r in range(len(ref)):
        top = np.argsort(-ref[r])[:2]
        for c in confs:
            motion = max(motion, abs(_margin(c[r], top) - _margin(ref[r], top)))
    M = max(0.2, motion)
    for c in confs:
        s = np.sort(c, axis=1)
        clear &= (s[:, -1] - s[:, -2]) >= M
    return spread, M, clear, ref


def verdict(u: np.ndarray, run: str):
    """(rows beyond S, clear rows with another argmax, per-row max |d|)."""
    S, M, clear, ref = rule(run)
    d = np.abs(u - ref).max(axis=1)
    flips = int(np.sum(clear & (u.argmax(1) != ref.argmax(1))))
    return int(np.sum(d > S)), flips, d


def test_granite_without_rope_survives_a_k_shift(tmp_path_factory):
    """granite with rope.scaling.finetuned = false has no RoPE layer: seq_add moves the positions only (llama.cpp
    0c1e570 aborts on this K-shift, GGML_ASSERT(buffer), so there is no recording); the next token's logits equal
    those of the prompt decoded at the shifted positions, bitwise (nothing depends on positions)."""
    m = model_of("granite-norope", tmp_path_factory)
    pr = list(range(40, 52))
    n, d = len(pr), 9
    ctx = ubatch.Context(m, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1)
    ctx.decode(Batch.from_arrays(tokens=pr, pos=list(range(n)), seq_ids=[[0]] * n, output=[0] * n))
    ctx.memory.seq_add(0, 0, n, d)
    ctx.decode(Batch.from_arrays(tokens=[77], pos=[n + d], seq_ids=[[0]], output=[1]))
    a = ctx.get_logits_ith(0).copy()
    ctx = ubatch.Context(m, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1)
    ctx.decode(Batch.from_arrays(tokens=pr + [77], pos=list(range(d, n + d + 1)), seq_ids=[[0]] * (n + 1),
                                 output=[0] * n + [1]))
    assert np.array_equal(a, ctx.get_logits_ith(n))


def test_supported_archs_listed():
    for a in ("llama", "qwen2", "gemma3", "qwen3", "phi3", "granite", "olmo2", "minicpm", "smollm3", "exaone4"):
        assert a in SUPPORTED_ARCHS


def test_recordings_have_a_spread_and_clear_rows():
    """The recordings are usable: llama.cpp's configurations differ (flash attention's f16 path) and most
    rows are clear of M (a third at least: smollm3's tiny model, whose last layer is a NoPE layer, is the most
    sensitive — llama.cpp's flash-attention run moves its logits by up to 6.7, M = 2.7)."""
    for run in RUNS:
        S, M, clear, ref = rule(run)
        assert 0 < S < 10 and clear.sum() >= len(ref) // 3, (run, S, M, int(clear.sum()))


def model_for_run(run: str, tmp_path_factory):
    """The run's model, with its recorded context overrides applied as the drop-in derives them (llama.cpp's
    cparams: ubatch.llama_cpp._context._rope_model)."""
    e, _ = recording(run)
    m = model_of(e["variant"], tmp_path_factory)
    if e.get("ctx_override"):
        import ubatch.llama_cpp as LC
        from ubatch.llama_cpp._context import _rope_model
        cp = LC.llama_context_default_params()
        for k, v in e["ctx_override"].items():
            setattr(cp, k, v)
        m = _rope_model(m, cp)
    return m


@pytest.mark.parametrize("run", RUNS)
def test_agrees_with_llama_cpp(run, tmp_path_factory):
    m = model_for_run(run, tmp_path_factory)
    u = ubatch_rows(m, run)
    beyond, flips, d = verdict(u, run)
    S, M, clear, _ = rule(run)
    assert beyond == 0 and flips == 0, (f"{run}: {beyond} rows beyond llama.cpp's spread S={S:.3g}, {flips} of "
                                        f"{int(clear.sum())} clear rows (M={M:.3g}) with another argmax; "
                                        f"per-row max |d| {np.round(d, 4).tolist()}")


def _without(m, **hp):
    """A shallow copy of model m with hyperparameters / weights replaced (the fused layers rebuilt)."""
    c = copy.copy(m)
    c._fused_layers = None
    w = {k[2:]: v for k, v in hp.items() if k.startswith("w_")}
    h = {k: v for k, v in hp.items() if not k.startswith("w_")}
    c.hparams = dataclasses.replace(m.hparams, **h)
    if w:
        c.weights = dataclasses.replace(m.weights, **w)
    return c


def _layers_without(m, **fields):
    return [dataclasses.replace(L, **fields) for L in m.weights.layers]


FEATURE_OFF = {
    "llama-linear": lambda m: _without(m, rope_freq_scale=1.0),
    "llama-yarn": lambda m: _without(m, rope_ext_factor=0.0, rope_attn_factor=1.0),
    "llama-yarn-ctx-scale": lambda m: _without(m, rope_attn_factor=m.hparams.rope_attn_factor * 1.25),
    "llama-yarn-ctx-linear": lambda m: _without(m, rope_ext_factor=1.0),
    "llama-rope-freqs": lambda m: _without(m, w_rope_freqs=None),
    "qwen3": lambda m: _without(m, w_layers=_layers_without(m, q_norm=None, k_norm=None)),
    "phi3-long": lambda m: _without(m, w_rope_long=m.weights.rope_short),
    "llama-longrope-long": lambda m: _without(m, w_rope_long=m.weights.rope_short),
    "llama-longrope": lambda m: _without(m, w_rope_short=None, rope_attn_factor=1.0),
    "granite-norope": lambda m: _without(m, rope_pattern=()),
    "phi3": lambda m: _without(m, rope_attn_factor=1.0),
    "granite": lambda m: _without(m, residual_scale=0.0),
    "olmo2": lambda m: _without(m, w_layers=_layers_without(m, post_attn_norm=None)),
    "minicpm": lambda m: _without(m, logit_scale=0.0),
    "exaone4": lambda m: _without(m, w_layers=_layers_without(m, q_norm=None, k_norm=None)),
    "smollm3": lambda m: _without(m, no_rope_layer_step=0),
}


@pytest.mark.parametrize("run", sorted(FEATURE_OFF))
def test_each_feature_matters(run, tmp_path_factory):
    """The rule is not loose: with the variant's feature turned off, ubatch no longer agrees."""
    m = FEATURE_OFF[run](model_for_run(run, tmp_path_factory))
    beyond, flips, d = verdict(ubatch_rows(m, run), run)
    assert beyond + flips > 0, (run, d.max())


@pytest.mark.parametrize("variant", sorted(arch_gguf.VARIANTS))
def test_fused_bitwise_reference(variant, tmp_path_factory):
    m = model_of(variant, tmp_path_factory)
    run = next(r for r in RUNS if INDEX[r]["variant"] == variant)
    a = ubatch_rows(m, run)
    fused.set_enabled(False)
    try:
        b = ubatch_rows(m, run)
    finally:
        fused.set_enabled(None)
    assert np.array_equal(a, b)


INV_ARCHS = ["qwen3", "phi3", "granite", "granite-norope", "olmo2", "minicpm", "smollm3", "exaone4",
             "llama-yarn", "llama-rope-freqs", "llama-longrope"]


@pytest.mark.parametrize("variant", INV_ARCHS)
def test_batch_invariance_bitwise(variant, tmp_path_factory):
    """A sequence's logits do not depend on the other sequences, n_ubatch, the KV layout, threads or chunks."""
    m = model_of(variant, tmp_path_factory)
    target = list(range(30, 47))
    others = others_for(m.n_vocab, [5, 23, 11])
    a = run_target(m, target, n_ubatch=512, n_threads=2, n_ctx=1024)
    b = run_target(m, target, others=others, n_ubatch=7, kv_unified=True, n_threads=1, chunks=(5, 11),
                   n_ctx=1024)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def _rewrite(tmp_path, variant: str, **kv):
    """The variant's GGUF with metadata keys replaced (value, type) or removed (None)."""
    return arch_gguf.write(tmp_path / "out.gguf", variant, override=kv)


VT = arch_gguf.VT


@pytest.mark.parametrize("variant, kv, needle", [
    ("llama-none", {"llama.rope.scaling.type": ("ntk", VT.STRING)}, "llama.rope.scaling.type = 'ntk'"),
    ("llama-yarn", {"llama.rope.scaling.yarn_log_multiplier": (0.1, VT.FLOAT32)}, "yarn_log_multiplier"),
    ("granite", {"granite.logit_scale": None}, "granite.logit_scale"),
    ("olmo2", {"olmo2.attention.sliding_window": (4, VT.UINT32)}, "olmo2.attention.sliding_window"),
    ("qwen3", {"qwen3.rope.dimension_count": (8, VT.UINT32)}, "invalid n_rot"),
    ("phi3", {"phi3.rope.dimension_count": (18, VT.UINT32)}, "invalid n_rot"),
    ("exaone4", {"exaone4.nextn_predict_layers": (1, VT.UINT32)}, "exaone4.nextn_predict_layers"),
    ("exaone4", {"exaone4.block_count": (64, VT.UINT32)}, "sliding-window layers"),
])
def test_unsupported_hparams_raise_naming_them(tmp_path, variant, kv, needle):
    with pytest.raises(GGUFError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        ubatch.Model.from_gguf(_rewrite(tmp_path, variant, **kv))


@pytest.mark.parametrize("variant, tensor", [("llama-rope-freqs", "rope_freqs.weight"),
                                             ("phi3", "rope_factors_long.weight")])
def test_rope_factors_wrong_shape_raise(tmp_path, variant, tensor):
    """A factor tensor of another length than n_rot / 2 is refused naming it (llama.cpp refuses it too)."""
    p = arch_gguf.write(tmp_path / "a.gguf", variant, tensors={tensor: np.ones(5, dtype=np.float32)})
    with pytest.raises(GGUFError, match=f"tensor '{tensor}' has wrong shape"):
        ubatch.Model.from_gguf(p)
    bad = np.ones(arch_gguf.HD // 2 if variant != "phi3" else 6, dtype=np.float32)
    bad[1] = 0.0
    p = arch_gguf.write(tmp_path / "b.gguf", variant, tensors={tensor: bad})
    with pytest.raises(GGUFError, match=f"tensor '{tensor}' must hold finite non-zero factors"):
        ubatch.Model.from_gguf(p)


@pytest.mark.parametrize("variant, tensor", [("qwen3", "blk.0.attn_output.bias"), ("smollm3", "blk.1.attn_output.bias"),
                                             ("olmo2", "blk.0.attn_norm.weight"), ("llama-none", "rope_freqs_2.weight")])
def test_unused_tensors_raise_naming_them(tmp_path, variant, tensor):
    """A tensor the architecture does not read is refused (llama.cpp: "wrong number of tensors"), never ignored."""
    p = arch_gguf.write(tmp_path / "a.gguf", variant, extra={tensor: np.ones(arch_gguf.E, dtype=np.float32)})
    with pytest.raises(GGUFError, match=f"tensor '{tensor}' not used by architecture"):
        ubatch.Model.from_gguf(p)


def test_rewrite_roundtrip_loads(tmp_path):
    """The rewriting helper itself keeps a model loadable (so the refusals above are the keys')."""
    m = ubatch.Model.from_gguf(_rewrite(tmp_path, "granite"))
    assert m.arch == "granite" and m.hparams.logit_scale == 8.0


# ---- the RoPE kernel's YaRN / factor path --------------------------------------------------------------

def _rope_ext_ref(x, pos, n_rot, base, freq_scale, ext, attn, n_ctx_orig, factors, neox):
    """ggml_rope_ext's NORM / NEOX rotation in float64 (beta_fast 32, beta_slow 1)."""
    half = n_rot // 2
    i = np.arange(half)

    def corr(beta):
        return n_rot * np.log(n_ctx_orig / (beta * 2 * np.pi)) / (2 * np.log(base))
    lo, hi = max(0.0, np.floor(corr(32.0))), min(n_rot - 1.0, np.ceil(corr(1.0)))
    out = x.astype(np.float64).copy()
    for r in range(x.shape[0]):
        extrap = pos[0, r] * base ** (-2.0 * i / n_rot) / (factors if factors is not None else 1.0)
        interp = freq_scale * extrap
        mscale = attn
        th = interp
        if ext:
            ramp = (1 - np.clip((i - lo) / max(0.001, hi - lo), 0, 1)) * ext
            th = interp * (1 - ramp) + extrap * ramp
            mscale = attn * (1 + 0.1 * np.log(1 / freq_scale))
        c, s = np.cos(th) * mscale, np.sin(th) * mscale
        a, b = (i, i + half) if neox else (2 * i, 2 * i + 1)
        x0, x1 = out[r][:, a].copy(), out[r][:, b].copy()
        out[r][:, a] = x0 * c - x1 * s
        out[r][:, b] = x0 * s + x1 * c
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("ext, attn, factors", [(1.0, 0.9, False), (0.0, 1.19, True), (1.0, 1.0, True)])
def test_rope_ext_matches_float64(neox, ext, attn, factors):
    from ubatch.compute import kernels
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 2, 24)).astype(np.float32)
    pos = np.array([[0, 1, 5, 17, 40, 63]], dtype=np.int32)
    ff = (1.0 + 3.0 * rng.random(8)).astype(np.float32) if factors else None
    ref = _rope_ext_ref(x, pos, 16, 10000.0, 0.25, ext, attn, 32, ff, neox)
    e = kernels.RopeExt(ext_factor=ext, attn_factor=attn, n_ctx_orig=32, freq_factors=ff)
    kernels.rope(x, pos, n_rot=16, base=10000.0, mode=kernels.ROPE_NEOX if neox else kernels.ROPE_NORM,
                 freq_scale=0.25, ext=e)
    assert np.abs(x - ref).max() < 2e-5
    assert np.array_equal(x[:, :, 16:], ref[:, :, 16:].astype(np.float32))


def test_rope_shift_ext_is_the_rotation_by_delta():
    """The K-shift with YaRN / factors rotates each cell by its delta exactly as the forward's RoPE at
    position delta (bitwise), as llama.cpp's build_rope_shift passes the same parameters."""
    from ubatch.compute import kernels
    rng = np.random.default_rng(8)
    k = rng.standard_normal((10, 2, 16)).astype(np.float32)
    delta = rng.integers(-30, 30, 10).astype(np.int32)
    e = kernels.RopeExt(ext_factor=1.0, attn_factor=0.95, n_ctx_orig=32,
                        freq_factors=(1 + rng.random(8)).astype(np.float32))
    a = k.copy()
    kernels.rope_shift(a, delta, n_rot=16, base=10000.0, freq_scale=0.25, ext=e)
    b = k.copy()
    kernels.rope(b, delta[None], n_rot=16, base=10000.0, freq_scale=0.25, ext=e)
    moved = delta != 0
    assert np.array_equal(a[moved], b[moved]) and np.array_equal(a[~moved], k[~moved])


def test_rope_ext_bad_factors_raise():
    from ubatch.compute import kernels
    x = np.zeros((1, 1, 16), dtype=np.float32)
    pos = np.zeros((1, 1), dtype=np.int32)
    with pytest.raises(ValueError, match="frequency factors have shape"):
        kernels.rope(x, pos, n_rot=16, base=1e4, ext=kernels.RopeExt(freq_factors=np.ones(5, np.float32)))
    with pytest.raises(ValueError, match="finite and non-zero"):
        kernels.rope(x, pos, n_rot=16, base=1e4, ext=kernels.RopeExt(freq_factors=np.zeros(8, np.float32)))
    with pytest.raises(ValueError, match="n_ctx_orig"):
        kernels.rope(x, pos, n_rot=16, base=1e4, ext=kernels.RopeExt(n_ctx_orig=0))


SHIFT_RUNS = sorted(r for r in RUNS if INDEX[r].get("shift"))


@pytest.mark.parametrize("run", SHIFT_RUNS)
def test_k_shift_agrees_with_llama_cpp(run, tmp_path_factory):
    """seq_add's K-shift re-rotates cached K with the forward's rope parameters (YaRN, attention factor,
    frequency factors; smollm3: its NoPE layer too), as llama.cpp's build_rope_shift does — so with YaRN or an
    attention factor the magnitude factor is applied once more, as in llama.cpp. Same rule as the decode rows
    (S and M of the scenario's own configurations)."""
    e, z = recording(run)
    m = model_of(e["variant"], tmp_path_factory)
    pr, d, tok = z["prompt"].tolist(), e["shift"]["delta"], e["shift"]["token"]
    n = len(pr)
    ctx = ubatch.Context(m, n_ctx=e["n_ctx"], n_batch=512, n_ubatch=512, n_seq_max=1, n_threads=2,
                         type_k="f32", type_v="f32")
    assert ctx.decode(Batch.from_arrays(tokens=pr, pos=list(range(n)), seq_ids=[[0]] * n, output=[0] * n)) == 0
    ctx.memory.seq_add(0, 0, n, d)
    assert ctx.decode(Batch.from_arrays(tokens=[tok], pos=[n + d], seq_ids=[[0]], output=[1])) == 0
    u = ctx.get_logits_ith(0)
    confs = [z[f"c{i}_shift"][0] for i in range(len(e["configs"]))]
    S = max(float(np.abs(c - confs[0]).max()) for c in confs[1:])
    top = np.argsort(-confs[0])[:2]
    M = max([0.2] + [abs(_margin(c, top) - _margin(confs[0], top)) for c in confs])
    assert np.abs(u - confs[0]).max() <= S, (np.abs(u - confs[0]).max(), S)
    if min(np.sort(c)[-1] - np.sort(c)[-2] for c in confs) >= M:
        assert u.argmax() == confs[0].argmax()


@pytest.mark.parametrize("run", ["llama-yarn", "phi3-long", "granite", "llama-yarn-ctx-scale", "llama-yarn-ctx-linear"])
def test_drop_in_llama_agrees(run, tmp_path):
    """Through the llama-cpp-python drop-in (ubatch.llama_cpp.Llama, the context's rope parameters derived as
    llama.cpp's cparams), the prompt rows agree the same way."""
    from ubatch.llama_cpp import Llama
    e, z = recording(run)
    path = arch_gguf.write(tmp_path / "m.gguf", e["variant"])
    llm = Llama(model_path=path, n_ctx=e["n_ctx"], n_batch=512, n_ubatch=512, n_threads=2, logits_all=True,
                verbose=False, flash_attn=False, type_k=0, type_v=0,   # f32 K/V as recorded
                **(e.get("ctx_override") or {}))
    pr = z["prompt"].tolist()
    llm.eval(pr)
    S, M, clear, ref = rule(run)
    u = np.array(llm.scores[:len(pr)])
    assert np.abs(u - ref[:len(pr)]).max(axis=1).max() <= S
    assert np.array_equal(u.argmax(1)[clear[:len(pr)]], ref[:len(pr)].argmax(1)[clear[:len(pr)]])


def test_fused_layer_options_refuse_bad_combinations(tmp_path_factory):
    """The layer's general options are checked in C before anything runs, naming the culprit."""
    from ubatch._ffi import ffi, lib
    m = model_of("qwen3", tmp_path_factory)
    L = fused.layers(m, 256)[0]
    x = np.zeros((1, m.n_embd), np.float32)
    pos = np.zeros((1, 1), np.int32)
    k = np.zeros((1, 4, m.n_head_kv, m.head_dim), np.float32)
    v = np.zeros_like(k)
    dst = np.array([2], np.int64)
    rs, off, cells = np.zeros(1, np.int32), np.array([0, 1], np.int32), np.array([2], np.int32)
    kv = ffi.new("ub_layer_kv *")
    keepalive = [ffi.from_buffer("uint8_t[]", k), ffi.from_buffer("uint8_t[]", v), ffi.from_buffer("int64_t[]", dst),
                 ffi.from_buffer("int32_t[]", rs), ffi.from_buffer("int32_t[]", off), ffi.from_buffer("int32_t[]", cells)]
    kv.k, kv.v, kv.dst, kv.row_stream, kv.off, kv.cells = keepalive
    kv.k_type = kv.v_type = lib.UB_T_F32
    kv.n_stream, kv.kv_size = 1, 4
    for change, msg in ((lambda b: setattr(b, "k_norm", ffi.NULL), "q_norm and k_norm go together"),
                        (lambda b: setattr(b, "qk_norm_full", 2), "qk_norm_full must be 0 or 1"),
                        (lambda b: setattr(b, "kind", lib.UB_LAYER_GEMMA3), "gemma layer")):
        bad = ffi.new("ub_layer *", L[0])
        change(bad)
        before = x.copy()
        with pytest.raises(ValueError, match=msg):
            fused.layer_forward(bad, kv, x, pos, None, 1)
        assert np.array_equal(x, before) and not k.any()
    fused.layer_forward(L, kv, x + 1.0, pos, None, 1)   # the unchanged layer runs
    assert np.abs(k[0, 2]).sum() > 0
