"""Architecture registry: general.architecture -> its module under ubatch.model.arch."""
from __future__ import annotations

from types import ModuleType
from typing import Dict

from ubatch.model.arch import (exaone4, gemma2, gemma3, granite, granitemoe, llama, minicpm, olmo2, olmoe, phi3, qwen2,
                               qwen2moe, qwen3, qwen3moe, smollm3)

ARCHITECTURES: Dict[str, ModuleType] = {m.NAME: m for m in (llama, qwen2, gemma3, gemma2, qwen2moe, qwen3moe, qwen3,
                                                            phi3, granite, olmo2, minicpm, smollm3, exaone4, olmoe,
                                                            granitemoe)}
SUPPORTED_ARCHS = tuple(ARCHITECTURES)


def get(arch: str, path: str = "") -> ModuleType:
    from ubatch.model.gguf_file import GGUFError
    mod = ARCHITECTURES.get(arch)
    if mod is None:
        raise GGUFError(f"{path}: unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
    return mod


__all__ = ["ARCHITECTURES", "SUPPORTED_ARCHS", "get"]
