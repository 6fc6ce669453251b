"""BPE pre-tokenizer names (GGUF `tokenizer.ggml.pre`) -> the regex list llama.cpp 0c1e570 runs and the flags
that name sets in llama_vocab::impl::load. Only the lists implemented in csrc/tokenizer/tok_pretok.c are here;
any other name is refused with a clear error rather than tokenized differently."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from ubatch._ffi import lib


@dataclass(frozen=True)
class PreTokenizer:
    regex: int                # lib.UB_PRE_*
    clean_spaces: bool = True
    ignore_merges: bool = False
    add_bos: bool = False


def _table() -> Dict[str, PreTokenizer]:
    d, g2, l3, q2, sm = lib.UB_PRE_DEFAULT, lib.UB_PRE_GPT2, lib.UB_PRE_LLAMA3, lib.UB_PRE_QWEN2, lib.UB_PRE_SMOLLM
    t: Dict[str, PreTokenizer] = {"default": PreTokenizer(d)}
    for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
              "jina-v5-nano"):
        t[n] = PreTokenizer(l3, ignore_merges=True, add_bos=True)
    for n in ("dbrx", "smaug-bpe"):
        t[n] = PreTokenizer(l3)
    for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
              "modern-bert", "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"):
        t[n] = PreTokenizer(g2)
    for n in ("trillion", "granite-docling"):
        t[n] = PreTokenizer(g2, clean_spaces=False)
    for n in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"):
        t[n] = PreTokenizer(q2, clean_spaces=False)
    for n in ("megrez", "stablelm2"):
        t[n] = PreTokenizer(q2)
    for n in ("smollm", "command-r"):
        t[n] = PreTokenizer(sm, clean_spaces=False)
    for n in ("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"):
        t[n] = PreTokenizer(sm)
    return t


PRE_TOKENIZERS: Dict[str, PreTokenizer] = _table()
