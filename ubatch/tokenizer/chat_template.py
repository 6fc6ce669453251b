"""Tokenizer.apply_chat_template's rendering: the template in the chat environment every chat format uses
(ubatch.chat.jinja: llama-cpp-python's Jinja2ChatFormatter environment), its failures as TokenizerError."""
from __future__ import annotations

from typing import Sequence

from ubatch.tokenizer.errors import TokenizerError


def _raise(message: str) -> None:
    raise TokenizerError(f"chat template: {message}")


def render_chat_template(template: str, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                         bos_token: str = "", eos_token: str = "", **kwargs) -> str:
    if not isinstance(messages, (list, tuple)):
        raise TokenizerError("messages must be a list of dicts with 'role' and 'content'")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise TokenizerError(f"messages[{k}] must be a dict with a 'role' (and usually 'content')")
    from jinja2 import TemplateError
    from ubatch.chat import jinja
    try:
        compiled = jinja.compile_template(template)
    except TemplateError as e:
        raise TokenizerError(f"chat template does not compile: {e}") from None
    try:
        return compiled.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                               bos_token=bos_token, eos_token=eos_token, raise_exception=_raise,
                               strftime_now=jinja.strftime_now, **kwargs)
    except TokenizerError:
        raise
    except TemplateError as e:
        raise TokenizerError(f"chat template failed: {e}") from None
