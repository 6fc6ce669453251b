"""Chat templates for models whose GGUF has none, by architecture: kept for imports; the rule itself is
ubatch.chat.resolve's (Gemma GGUFs get its "gemma3" format, GEMMA3_TEMPLATE)."""
from __future__ import annotations

from typing import Optional

from ubatch.chat.resolve import ARCH_FORMATS, GEMMA3_TEMPLATE

GEMMA = GEMMA3_TEMPLATE
BY_ARCH = {arch: GEMMA3_TEMPLATE for arch, fmt in ARCH_FORMATS.items() if fmt == "gemma3"}


def fallback(arch: Optional[str]) -> Optional[str]:
    return BY_ARCH.get(arch or "")
