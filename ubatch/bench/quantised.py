"""Quantised copies of the real models in other GGUF weight types (IQ4_XS, IQ3_S, ...), made on this machine by
llama.cpp's own quantiser (llama-cpp-python's ``llama_model_quantize``) from the cached real models, and kept in
``<cache>/quantised/`` (the cache of ubatch.model.fetch): never committed, remade when missing.

    path("qwen2.5-0.5b", "IQ4_XS")  ->  ~/.cache/ubatch/quantised/qwen2.5-0.5b-IQ4_XS.gguf

The source files are Q4_K_M, so this is a re-quantisation (``allow_requantize``): every tensor is dequantised
and quantised again to the target file type with llama.cpp's rules for that type (which tensors keep a higher
type; a tensor whose rows are not a multiple of 256 falls back to IQ4_NL — most of these two models' matrices,
896 or 640 columns wide, so IQ4_XS / IQ3_S files exercise IQ4_NL as well). No importance matrix: llama.cpp
refuses IQ2_XXS / IQ2_XS / IQ1_S without one, so only the file types that need none are offered here.

Needs llama-cpp-python (imported only when a file must be made). ``python -m ubatch.bench.quantised [names]``
makes them all.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict

from ubatch.model import fetch

# llama_ftype values (llama.h) of the file types offered (none needs an importance matrix)
FTYPES: Dict[str, int] = {"IQ4_XS": 30, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "TQ2_0": 37, "TQ1_0": 36}


def path(name: str, ftype: str, n_threads: int = 2) -> Path:
    """The quantised copy of real model `name` in file type `ftype` (made once with llama.cpp's quantiser)."""
    if ftype not in FTYPES:
        raise ValueError(f"unknown file type {ftype!r} (offered: {', '.join(FTYPES)})")
    m = fetch.resolve(name)
    out = fetch.cache_dir() / "quantised" / f"{m.name}-{ftype}.gguf"
    if out.is_file() and out.stat().st_size > 0:
        return out
    src = fetch.path(m.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        import llama_cpp
    except ImportError as e:
        raise RuntimeError(f"making {out.name} needs llama-cpp-python (llama.cpp's quantiser)") from e
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPES[ftype]
    p.nthread = n_threads
    p.allow_requantize = True
    tmp = out.with_suffix(".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), p)
    if rc != 0 or not tmp.is_file():
        raise RuntimeError(f"llama_model_quantize({src.name} -> {ftype}) failed with status {rc}")
    os.replace(tmp, out)
    return out


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or ["qwen2.5-0.5b", "gemma3-270m"]
    for n in names:
        for ft in ("IQ4_XS", "IQ3_S"):
            print(path(n, ft))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
