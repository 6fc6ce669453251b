"""Build the small vocabulary-only GGUFs of tests/data/tokenizer/ (mini-*.gguf) from llama.cpp's own test
vocabularies (vendor/llama.cpp/models/ggml-vocab-*.gguf in the llama-cpp-python 0.3.36 sdist, MIT):

    python tests/data/tokenizer/make_mini_vocabs.py /path/to/vendor/llama.cpp/models

* mini-spm.gguf     llama-spm's first 4000 tokens (SPM with add_space_prefix = true, byte fallback)
* mini-phi3.gguf    phi-3's first 4000 tokens + its added specials (general.name Phi3: llama.cpp's RSTRIP rule)
* mini-bpe-<pre>.gguf  gpt-2's 256 byte tokens + its first 3000 merges, <|endoftext|>, plus a CONTROL
  <|im_end|>, a USER_DEFINED <tool_call>, a NORMAL </s> (forced CONTROL by the EOG rule); one file per
  pre-tokenizer: default, gpt-2, llama-bpe (llama3), qwen2, smollm, starcoder
* mini-bpe-lstrip.gguf  the same with general.name "modern-bert-mini" and a CONTROL [MASK]: llama.cpp's LSTRIP rule
"""
from __future__ import annotations

import os
import sys

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BPE_PRES = ["default", "gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder"]


def _read(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]) for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    scores = ([float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
              if "tokenizer.ggml.scores" in f else None)
    merges = ([bytes(f["tokenizer.ggml.merges"].parts[i]) for i in f["tokenizer.ggml.merges"].data]
              if "tokenizer.ggml.merges" in f else None)
    return r, toks, types, scores, merges


def _copy_general(r, w, skip=("general.architecture", "general.name")):
    for k, fl in r.fields.items():
        if k.startswith("GGUF.") or k.startswith("tokenizer.") or k in skip:
            continue
        t = fl.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            continue
        w.add_key_value(k, fl.contents(), t)


def _write(path, arch, r, model, pre, toks, types, scores, merges, ids, flags, name=None):
    w = gguf.GGUFWriter(path, arch)
    _copy_general(r, w)
    w.add_name(name if name is not None else str(r.fields["general.name"].contents()))
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for k, v in ids.items():
        w.add_uint32(f"tokenizer.ggml.{k}_token_id", v)
    for k, v in flags.items():
        w.add_bool(f"tokenizer.ggml.{k}", v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    print("wrote", path, os.path.getsize(path), "bytes")


def main(models_dir: str) -> None:
    # SPM
    r, toks, types, scores, _ = _read(os.path.join(models_dir, "ggml-vocab-llama-spm.gguf"))
    n = 4000
    _write(os.path.join(HERE, "mini-spm.gguf"), "llama", r, "llama", "default", toks[:n], types[:n], scores[:n],
           None, {"bos": 1, "eos": 2, "unknown": 0}, {"add_bos_token": True, "add_eos_token": False})
    r, toks, types, scores, _ = _read(os.path.join(models_dir, "ggml-vocab-phi-3.gguf"))
    keep = list(range(4000)) + list(range(32000, len(toks)))
    remap = {old: new for new, old in enumerate(keep)}
    _write(os.path.join(HERE, "mini-phi3.gguf"), "phi3", r, "llama", "default", [toks[i] for i in keep],
           [types[i] for i in keep], [scores[i] for i in keep], None,
           {"bos": 1, "eos": remap[32000], "unknown": 0, "padding": remap[32000]},
           {"add_bos_token": True, "add_eos_token": False})
    # BPE
    r, toks, types, _, merges = _read(os.path.join(models_dir, "ggml-vocab-gpt-2.gguf"))
    m = 3000
    kept = toks[:256 + m]
    have = set(kept)
    mm = []
    for x in merges[:m]:
        a, b = x.split(b" ", 1)
        if a in have and b in have and a + b in have:
            mm.append(x)
    extra = [(b"<|endoftext|>", 3), (b"<|im_end|>", 3), (b"<tool_call>", 4), (b"</s>", 1)]
    btoks = kept + [t for t, _ in extra]
    btypes = [1] * len(kept) + [ty for _, ty in extra]
    eot = len(kept)
    for pre in BPE_PRES:
        _write(os.path.join(HERE, f"mini-bpe-{pre}.gguf"), "gpt2", r, "gpt2", pre, btoks, btypes, None, mm,
               {"bos": eot, "eos": eot}, {})
    # llama.cpp's LSTRIP rule: general.name containing "modern-bert" gives [MASK] LSTRIP
    _write(os.path.join(HERE, "mini-bpe-lstrip.gguf"), "gpt2", r, "gpt2", "gpt-2", btoks + [b"[MASK]"],
           btypes + [3], None, mm, {"bos": eot, "eos": eot}, {}, name="modern-bert-mini")


if __name__ == "__main__":
    main(sys.argv[1])
