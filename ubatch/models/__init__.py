"""Models shipped inside the package (no download needed)."""
from __future__ import annotations

import os

from ubatch.model.gguf_model import Model

_HERE = os.path.dirname(os.path.abspath(__file__))
TINY_LLAMA_PATH = os.path.join(_HERE, "tiny-llama-f32.gguf")


def tiny_llama() -> Model:
    """The embedded default model: a 2-layer random-weight llama (n_vocab 256, n_embd 64, GQA 4:2, f32)."""
    return Model.from_gguf(TINY_LLAMA_PATH)


__all__ = ["tiny_llama", "TINY_LLAMA_PATH"]
