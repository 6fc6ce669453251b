"""Chat templates: the GGUF's Jinja template rendered with jinja2's sandboxed environment, with the helpers
HF / llama-cpp-python templates expect (raise_exception, strftime_now, tojson that keeps non-ASCII)."""
from __future__ import annotations

import datetime
import json
from functools import lru_cache
from typing import Sequence

from ubatch.tokenizer.errors import TokenizerError


@lru_cache(maxsize=16)
def _compile(template: str):
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # pragma: no cover - jinja2 is a dependency
        raise TokenizerError("apply_chat_template needs jinja2 (pip install jinja2)") from e

    def raise_exception(message: str) -> None:
        raise TokenizerError(f"chat template: {message}")

    def tojson(x, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
        return json.dumps(x, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson
    try:
        return env.from_string(template)
    except TemplateError as e:
        raise TokenizerError(f"chat template does not compile: {e}") from None


def render_chat_template(template: str, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                         bos_token: str = "", eos_token: str = "", **kwargs) -> str:
    if not isinstance(messages, (list, tuple)):
        raise TokenizerError("messages must be a list of dicts with 'role' and 'content'")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise TokenizerError(f"messages[{k}] must be a dict with a 'role' (and usually 'content')")
    from jinja2 import TemplateError
    try:
        return _compile(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                         bos_token=bos_token, eos_token=eos_token, **kwargs)
    except TokenizerError:
        raise
    except TemplateError as e:
        raise TokenizerError(f"chat template failed: {e}") from None
