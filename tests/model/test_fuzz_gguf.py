"""GGUF byte fuzzer: small valid GGUF files written with the `gguf` package (a llama model with
F16 or Q8_0 tensors, a BPE vocabulary and a chat template; an SPM vocabulary without tensors) have their bytes
mutated where the structure lives -- the header, the key/value section (key lengths, value types, array
element types and counts, string lengths, values), the tensor infos (name lengths, n_dims, dims, types) and the
tensor offsets -- by hypothesis: integer fields set to boundary values, bytes overwritten, bits flipped, the file
cut short. Loading the result (GGUFFile, Tokenizer.from_gguf, Model.from_gguf, then a short decode when the model
loads) may only raise GGUFError / ValueError (TokenizerError and BatchError are ValueErrors): never another
exception, a crash (the ASan run), a hang (hypothesis' per-example deadline) or a blow-up (the address space is
capped at +1 GiB while an example runs, so one would surface as a MemoryError and fail).

The default run uses a short profile (60 examples per seed); `make fuzz` (HYPOTHESIS_PROFILE=fuzz) runs 3,000."""
from __future__ import annotations

import os
import resource
import struct
import tempfile
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write the fuzzer's seed files")

import gguf_util as G  # noqa: E402
from ubatch.model import GGUFError, Model  # noqa: E402
from ubatch.model.gguf_file import GGUFFile  # noqa: E402
from ubatch.tokenizer import Tokenizer  # noqa: E402

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
N_EXAMPLES = {"fuzz": 3000, "asan": 15}.get(PROFILE, 60)
FUZZ = settings(max_examples=N_EXAMPLES, deadline=10_000 if PROFILE == "asan" else 3_000, derandomize=PROFILE != "fuzz",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
BOUNDARY = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 255, 256, 2**15, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
            2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _slots(path: str):
    """(offset, size, region) of every structural field of a valid GGUF (via gguf.GGUFReader's parts)."""
    r = gguf.GGUFReader(path)
    out = [(4, 4, "header"), (8, 8, "header"), (16, 8, "header")]
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        off = f.offset
        for part in f.parts:
            n = part.nbytes
            if n in (1, 2, 4, 8):
                out.append((off, n, "kv"))
            off += n
    for t in r.tensors:
        off = t.field.offset
        for k, part in enumerate(t.field.parts):
            n = part.nbytes
            if n in (4, 8):
                out.append((off, n, "offset" if k == len(t.field.parts) - 1 else "tensor_info"))
            off += n
    return out, int(r.data_offset)


def _seeds():
    d = tempfile.mkdtemp(prefix="ubatch-fuzz-gguf-")
    paths = [G.small_model(os.path.join(d, "f16.gguf")),
             G.small_model(os.path.join(d, "q8.gguf"), qtype=gguf.GGMLQuantizationType.Q8_0)]
    spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁a", "▁", "a", "b", "ab"]
    kv = {"tokenizer.ggml.model": ("llama", G.VT.STRING), "tokenizer.ggml.tokens": (spm, G.VT.ARRAY, G.VT.STRING),
          "tokenizer.ggml.scores": ([0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0], G.VT.ARRAY, G.VT.FLOAT32),
          "tokenizer.ggml.token_type": ([2, 3, 3] + [6] * 256 + [1] * 5, G.VT.ARRAY, G.VT.INT32)}
    paths.append(G.write(os.path.join(d, "spm.gguf"), kv, tensors=False))
    seeds = []
    for p in paths:
        slots, data_start = _slots(p)
        with open(p, "rb") as f:
            seeds.append((os.path.basename(p), f.read(), slots, data_start))
    return d, seeds


DIR, SEEDS = _seeds()


@st.composite
def mutated(draw, k: int):
    name, raw, slots, data_start = SEEDS[k]
    buf = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int", "int", "int", "bytes", "flip", "cut"]))
        if kind == "int":
            off, n, _region = draw(st.sampled_from(slots))
            v = draw(st.one_of(st.sampled_from(BOUNDARY), st.integers(0, 2**(8 * n) - 1),
                               st.sampled_from([len(raw), data_start, len(raw) - data_start])))
            if off + n <= len(buf):
                buf[off:off + n] = (v % 2**(8 * n)).to_bytes(n, "little")
        elif kind == "bytes":
            pos = draw(st.integers(0, max(0, min(len(buf), data_start) - 1)))
            chunk = draw(st.binary(min_size=1, max_size=8))
            buf[pos:pos + len(chunk)] = chunk
        elif kind == "flip" and buf:
            pos = draw(st.integers(0, max(0, min(len(buf), data_start) - 1)))
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            buf = buf[:draw(st.integers(0, len(buf)))]
    return bytes(buf)


@contextmanager
def address_space_cap(extra: int = 1 << 30):
    """RLIMIT_AS = the current address space + extra while the block runs (not under ASan, whose shadow memory
    makes the figure meaningless)."""
    if PROFILE == "asan" or os.environ.get("LD_PRELOAD", "").find("asan") >= 0:
        yield
        return
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _tokenize(tok) -> None:
    """The fuzzed vocabulary at work: encode (specials parsed or not, invalid UTF-8 too), decode, pieces."""
    for text in ("ab a<|im_end|> <s>x", b"\xff\xfeab \xe7\x8c", "▁a ab"):
        try:
            ids = tok.encode(text, parse_special=True, strict_utf8=False)
            tok.decode_bytes(ids, unparse_special=True)
            for i in ids[:8]:
                tok.token_to_piece(i, special=True)
        except ValueError as e:
            assert str(e).strip()


def _load_everything(path: str) -> None:
    try:
        GGUFFile(path)
    except (GGUFError, ValueError) as e:
        assert str(e).strip()
    try:
        _tokenize(Tokenizer.from_gguf(path))
    except (GGUFError, ValueError) as e:
        assert str(e).strip()
    try:
        m = Model.from_gguf(path)
    except (GGUFError, ValueError) as e:
        assert str(e).strip()
        return
    import ubatch
    try:
        tok = m.tokenizer
        ids = tok.encode("ab a", add_special=False)[:4] or [0]
    except ValueError:
        ids = [0, 1]
    ids = [i % m.n_vocab for i in ids]
    ctx = ubatch.Context(m, n_ctx=32, n_batch=8, n_ubatch=8, n_seq_max=1)
    try:
        ctx.decode(ubatch.Batch.from_arrays(tokens=np.asarray(ids, np.int32), pos=np.arange(len(ids)),
                                            output=[True] * len(ids)))
        assert ctx.get_logits_ith(-1).shape == (m.n_vocab,)
    except ValueError as e:
        assert str(e).strip()
    finally:
        ctx.close() if hasattr(ctx, "close") else None


@pytest.mark.parametrize("seed", SEEDS, ids=[s[0] for s in SEEDS])
def test_the_seeds_load(seed):
    name, raw, slots, data_start = seed
    p = os.path.join(DIR, "seed-" + name)
    with open(p, "wb") as f:
        f.write(raw)
    assert GGUFFile(p).metadata and Tokenizer.from_gguf(p).n_vocab > 0
    assert len(slots) > 20 and 24 < data_start <= len(raw) + 32       # (no tensors: the aligned end)
    if name != "spm.gguf":
        _load_everything(p)


@pytest.mark.parametrize("k", range(len(SEEDS)), ids=[s[0] for s in SEEDS])
def test_mutated_gguf_only_raises_gguf_or_value_errors(k, tmp_path):
    @FUZZ
    @given(data=mutated(k))
    def run(data):
        p = str(tmp_path / "m.gguf")
        with open(p, "wb") as f:
            f.write(data)
        with address_space_cap():
            _load_everything(p)
    run()
