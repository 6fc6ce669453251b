"""llama_cpp.llama_grammar: LlamaGrammar (GBNF text checked with llama.cpp's parser when it is made: a bad
grammar raises ubatch.grammar.GrammarError, a ValueError naming the byte, line and column, where
llama-cpp-python would hand a grammar to a sampler that fails), json_schema_to_gbnf and its SchemaConverter
(llama-cpp-python 0.3.36's text, see ubatch.grammar.schema for the cases where its text is broken and ours is
not) and JSON_GBNF (a JSON grammar with the language of llama.cpp's grammars/json.gbnf)."""
from __future__ import annotations

import json
from pathlib import Path
from itertools import groupby  # noqa: F401  (names 0.3.36's module has)
from typing import Any, List, Optional, Set, Tuple, Union  # noqa: F401

from ubatch.grammar.schema import (DOT, DOTALL, PRIMITIVES as PRIMITIVE_RULES, RESERVED as RESERVED_NAMES,  # noqa: F401
                                   FORMATS as STRING_FORMAT_RULES, SPACE_RULE, Builtin as BuiltinRule,
                                   SchemaConverter, SchemaError, build_repetition as _build_repetition)
from ubatch.grammar.schema import json_schema_to_gbnf as _to_gbnf

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"

# the language of llama.cpp's grammars/json.gbnf (an object at the root), written out here
JSON_GBNF = r'''root ::= object
value ::= object | array | string | number | ( "true" | "false" | "null" ) ws
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" char* "\"" ws
char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\bfnrt] | "u" hex hex hex hex )
hex ::= [0-9a-fA-F]
number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9] [1-9]{0,15} )? ws
ws ::= ( " " | "\n" [ \t]{0,20} )?
'''


class LlamaGrammar:
    """A GBNF grammar for the samplers (`grammar=` of Llama.create_completion / create_chat_completion /
    generate / sample). The text is parsed now (tokens written <text> are resolved later, against the model's
    vocabulary)."""

    def __init__(self, *args, _grammar: str, **kwargs) -> None:
        from ubatch.grammar import Grammar
        if not isinstance(_grammar, str):
            raise TypeError(f"LlamaGrammar: the grammar must be a str, got {type(_grammar).__name__}")
        Grammar(_grammar, None, LLAMA_GRAMMAR_DEFAULT_ROOT, syntax_only=True)   # raises GrammarError
        self._grammar = _grammar
        self._root = LLAMA_GRAMMAR_DEFAULT_ROOT

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: Union[str, Path], verbose: bool = True) -> "LlamaGrammar":
        try:
            with open(file) as f:
                grammar = f.read()
        except Exception as err:
            raise Exception(f"{cls.from_file.__name__}: error reading grammar file: {err}")
        if grammar:
            return cls.from_string(grammar, verbose=verbose)
        raise ValueError(f"{cls.from_file.__name__}: error parsing grammar file: params_grammer is empty")

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls.from_string(json_schema_to_gbnf(json_schema), verbose=verbose)

    def __repr__(self) -> str:
        return f"LlamaGrammar({self._grammar[:60]!r}{'...' if len(self._grammar) > 60 else ''})"


def grammar_for_response_format(response_format: dict) -> Optional[LlamaGrammar]:
    """llama-cpp-python's _grammar_for_response_format: {"type": "json_object"} -> JSON_GBNF, with "schema" ->
    the schema's grammar (JSON_GBNF when the schema cannot be converted); other types -> None."""
    if response_format.get("type") != "json_object":
        return None
    if "schema" in response_format:
        try:
            return LlamaGrammar.from_json_schema(json.dumps(response_format["schema"]))
        except Exception:
            pass
    return LlamaGrammar.from_string(JSON_GBNF)


def json_schema_to_gbnf(schema: str, prop_order: Optional[List[str]] = None) -> str:
    """llama-cpp-python 0.3.36's json_schema_to_gbnf (schema: JSON text; a dict is taken too)."""
    return _to_gbnf(schema, prop_order)


__all__ = ["LlamaGrammar", "LLAMA_GRAMMAR_DEFAULT_ROOT", "JSON_GBNF", "json_schema_to_gbnf", "SchemaConverter",
           "SchemaError", "SPACE_RULE", "DOT", "DOTALL", "PRIMITIVE_RULES", "STRING_FORMAT_RULES",
           "RESERVED_NAMES", "BuiltinRule"]
