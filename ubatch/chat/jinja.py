"""The Jinja environment chat templates render in, set up as llama-cpp-python 0.3.36's Jinja2ChatFormatter sets
it up (which follows Transformers'): a sandboxed, immutable environment with trim_blocks + lstrip_blocks, the
loop-controls extension ({% break %} / {% continue %}), `{% generation %}...{% endgeneration %}` rendered as
its body, and a `tojson` filter that keeps non-ASCII text (ensure_ascii=False, the indent / separators /
sort_keys arguments of json.dumps). Templates also get `raise_exception(msg)` (ValueError) and
`strftime_now(fmt)` in their context. One compiled template per text (cached)."""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Optional, Tuple

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTags(jinja2.ext.Extension):
    """`{% generation %}body{% endgeneration %}` (Transformers' assistant-mask markers) -> body, in the
    enclosing scope (a `set` inside it is seen after it, as in llama-cpp-python)."""

    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def tojson(x: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
           separators: Optional[Tuple[str, str]] = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def raise_exception(message: str):
    raise ValueError(message)


def environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTags, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env


@lru_cache(maxsize=32)
def compile_template(template: str) -> jinja2.Template:
    """The template compiled in the chat environment (jinja2.TemplateSyntaxError if it does not parse)."""
    return environment().from_string(template)


def render(template: str, **context: Any) -> str:
    """Render `template` with raise_exception / strftime_now available (the caller's context wins)."""
    ctx = {"raise_exception": raise_exception, "strftime_now": strftime_now}
    ctx.update(context)
    return compile_template(template).render(**ctx)
