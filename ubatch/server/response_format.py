"""OpenAI's `response_format` on /v1/chat/completions -> the engine's grammar fields: {"type": "text"} nothing,
{"type": "json_object"} any JSON object (the JSON grammar; a "schema" key, as llama.cpp's server takes, is used as
the schema), {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} the schema's grammar
(ubatch.grammar.schema: llama-cpp-python's converter). A bad format or an unsupported schema is a 400 naming the
field."""
from __future__ import annotations

import re
from typing import Any, Dict, Optional

from ubatch.server.errors import APIError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _bad(msg: str, param: str) -> APIError:
    return APIError(400, msg, param=param)


def grammar_fields(rf: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """SamplingParams keyword arguments (grammar= or json_schema=) for a response_format."""
    if rf is None:
        return {}
    if not isinstance(rf, dict):
        raise _bad("response_format must be an object", "response_format")
    kind = rf.get("type", "text")
    if kind == "text":
        return {}
    if kind == "json_object":
        schema = rf.get("schema")
        if schema is None:
            from ubatch.llama_cpp.llama_grammar import JSON_GBNF
            return {"grammar": JSON_GBNF}
        return {"json_schema": _checked(schema, "response_format.schema")}
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise _bad("response_format.json_schema must be an object {name, schema, strict}",
                       "response_format.json_schema")
        name = js.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise _bad("response_format.json_schema.name must be 1-64 characters of [A-Za-z0-9_-]",
                       "response_format.json_schema.name")
        if "strict" in js and js["strict"] is not None and not isinstance(js["strict"], bool):
            raise _bad("response_format.json_schema.strict must be a boolean", "response_format.json_schema.strict")
        schema = js.get("schema", {})
        return {"json_schema": _checked(schema, "response_format.json_schema.schema")}
    raise _bad(f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
               "response_format.type")


def _checked(schema: Any, param: str) -> Any:
    """The schema, once its grammar is known to build (else a 400 naming param)."""
    from ubatch.grammar import Grammar, GrammarError
    from ubatch.grammar.schema import SchemaError, json_schema_to_gbnf
    if not isinstance(schema, (dict, bool)):
        raise _bad(f"{param} must be a JSON schema object", param)
    try:
        Grammar(json_schema_to_gbnf(schema), None, syntax_only=True)
    except (SchemaError, GrammarError) as e:
        raise _bad(f"{param}: {e}", param) from None
    return schema
