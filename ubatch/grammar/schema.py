"""JSON schema -> GBNF, giving the same text as llama-cpp-python 0.3.36's llama_grammar.json_schema_to_gbnf (its
SchemaConverter: the same rule names, the same built-in rules, the same narrower readings — minimum / maximum
ignored, every allOf member's properties required, anyOf members inside allOf optional, a pattern must be
anchored with ^...$, only local #/ references) except where its text is broken; there this one is correct:

* a regex escape it copies into a GBNF literal or class (`\\d`, `\\w`, `\\s` become classes, `\\.`, `\\/`, `\\$` ...
  the character itself; GBNF has no such escapes, llama.cpp refuses the grammar), and an escape followed by a
  quantifier is quantified alone (llama-cpp-python quantifies the whole literal before it);
* a `"` or a backslash in a property name, an enum or a const value (llama-cpp-python leaves the backslash of
  JSON's escapes unescaped: the GBNF is malformed or matches other text);
* a root `$ref` whose target holds references (llama-cpp-python never resolves those: KeyError).
Unsupported schemas raise SchemaError (a ValueError) naming the part, where llama-cpp-python asserts."""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

SPACE_RULE = '" "?'


class SchemaError(ValueError):
    """A schema the converter does not support (the message names the part)."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise SchemaError(msg)


def build_repetition(item: str, lo: int, hi: Optional[int], sep: Optional[str] = None,
                     item_is_literal: bool = False) -> str:
    """GBNF for item repeated lo..hi times (hi None: unbounded), items separated by sep, written as
    llama-cpp-python writes it (nested optional groups for a bounded tail)."""
    if not sep:
        if lo == 0 and hi == 1:
            return f"{item}?"
        if lo == 1 and hi is None:
            return f"{item}+"
    out = ""
    if lo > 0:
        if item_is_literal and sep is None:
            out = '"' + item[1:-1] * lo + '"'
        else:
            out = (f" {sep} " if sep else " ").join([item] * lo)

    def tail(n: int, with_sep: bool) -> str:
        unit = f"{sep} {item}" if with_sep and sep else item
        if n == 0:
            return ""
        if n == 1:
            return f"({unit})?"
        if sep and not with_sep:
            return f"({unit} {tail(n - 1, True)})?"
        return (f"({unit} " * n).rstrip() + ")?" * n

    if lo > 0 and hi != lo:
        out += " "
    if hi is not None:
        out += tail(hi - lo, lo > 0)
    else:
        star = f"({sep + ' ' if sep else ''}{item})"
        out = f"({item} {star}*)?" if lo == 0 and sep else out + f"{star}*"
    return out


class Builtin:
    def __init__(self, content: str, deps: Sequence[str] = ()) -> None:
        self.content, self.deps = content, list(deps)


_DIGITS15 = build_repetition("[0-9]", 0, 15)
_HEX = "[0-9a-fA-F]"

PRIMITIVES: Dict[str, Builtin] = {
    "boolean": Builtin('("true" | "false") space'),
    "decimal-part": Builtin("[0-9] " + _DIGITS15),
    "integral-part": Builtin("[0-9] | [1-9] " + _DIGITS15),
    "number": Builtin('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space',
                      ["integral-part", "decimal-part"]),
    "integer": Builtin('("-"? integral-part) space', ["integral-part"]),
    "value": Builtin("object | array | string | number | boolean | null",
                     ["object", "array", "string", "number", "boolean", "null"]),
    "object": Builtin('"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
                      ["string", "value"]),
    "array": Builtin('"[" space ( value ("," space value)* )? "]" space', ["value"]),
    "uuid": Builtin(r'"\"" ' + ' "-" '.join(_HEX * n for n in (8, 4, 4, 4, 12)) + r' "\"" space'),
    "char": Builtin(r'[^"\\] | "\\" (["\\/bfnrt] | "u" ' + " ".join([_HEX] * 4) + ")"),
    "string": Builtin(r'"\"" char* "\"" space', ["char"]),
    "null": Builtin('"null" space'),
}

FORMATS: Dict[str, Builtin] = {
    "date": Builtin('[0-9] [0-9] [0-9] [0-9] "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )'),
    "time": Builtin('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9] [0-9] [0-9] )? '
                    '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'),
    "date-time": Builtin('date "T" time', ["date", "time"]),
    "date-string": Builtin('"\\"" date "\\"" space', ["date"]),
    "time-string": Builtin('"\\"" time "\\"" space', ["time"]),
    "date-time-string": Builtin('"\\"" date-time "\\"" space', ["date-time"]),
}

DOTALL = "[\\U00000000-\\U0010FFFF]"
DOT = "[^\\x0A\\x0D]"
RESERVED = {"root", "dot", *PRIMITIVES, *FORMATS}
_BAD_NAME = re.compile(r"[^a-zA-Z0-9-]+")
_NOT_LITERAL = set("|.()[]{}*+?")
_UNESCAPE_IN_LITERAL = set("[]()|{}*+?")
_QUANT = set("*+?{")
# regex escapes that are classes, as GBNF classes (inside brackets: their contents)
_CLASS_ESC = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " \\t\\n\\r\\x0B\\x0C"}
# escapes GBNF reads the same way inside a literal or class
_GBNF_ESC = set('\\"[]-tnrxuU')


def _literal_text(s: str) -> str:
    """Text of a GBNF literal for s: backslash, quote and CR / LF escaped."""
    return s.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace('"', '\\"')


def _fix_escape(nxt: str, in_class: bool) -> str:
    """The GBNF for regex escape \\<nxt> (not a class escape) inside a literal or a class."""
    if nxt in _GBNF_ESC:
        return "\\" + nxt
    if nxt == "f":
        return "\\x0C"
    if nxt == "v":
        return "\\x0B"
    if nxt == "0":
        return "\\x00"
    if nxt == "^" and in_class:
        return "\\x5E"
    if nxt.isalnum():
        raise SchemaError(f"unsupported regex escape \\{nxt}")
    if nxt == '"':
        return '\\"'
    return nxt


class SchemaConverter:
    """llama-cpp-python's converter (same constructor); visit(schema, "") then format_grammar()."""

    def __init__(self, *, prop_order: Dict[str, int], allow_fetch: bool = False, dotall: bool = False,
                 raw_pattern: bool = False) -> None:
        self._prop_order = prop_order
        self._allow_fetch = allow_fetch
        self._dotall = dotall
        self._raw_pattern = raw_pattern
        self._rules: Dict[str, str] = {"space": SPACE_RULE}
        self._refs: Dict[str, Any] = {}
        self._resolving: Set[str] = set()

    # ---- rules
    def _format_literal(self, literal: str) -> str:
        return f'"{_literal_text(literal)}"'

    def _add_rule(self, name: str, rule: str) -> str:
        base = _BAD_NAME.sub("-", name)
        key = base
        if base in self._rules and self._rules[base] != rule:
            i = 0
            while f"{base}{i}" in self._rules and self._rules[f"{base}{i}"] != rule:
                i += 1
            key = f"{base}{i}"
        self._rules[key] = rule
        return key

    def _add_primitive(self, name: str, rule: Builtin) -> str:
        n = self._add_rule(name, rule.content)
        for dep in rule.deps:
            d = PRIMITIVES.get(dep) or FORMATS.get(dep)
            _need(d is not None, f"rule {dep} not known")
            if dep not in self._rules:
                self._add_primitive(dep, d)
        return n

    def format_grammar(self) -> str:
        return "\n".join(f"{k} ::= {v}" for k, v in sorted(self._rules.items()))

    # ---- references
    def resolve_refs(self, schema: Any, url: str) -> Any:
        """Makes every local $ref absolute (url + ref) and records its target in self._refs."""
        def visit(n: Any) -> Any:
            if isinstance(n, list):
                return [visit(x) for x in n]
            if not isinstance(n, dict):
                return n
            ref = n.get("$ref")
            if ref is not None and ref not in self._refs:
                _need(isinstance(ref, str), f"$ref must be a string, got {ref!r}")
                if ref.startswith("https://"):
                    raise SchemaError(f"remote schema references are not fetched: {ref}")
                _need(ref.startswith("#/"), f"Unsupported ref {ref}")
                ref = f"{url}{ref}"
                n["$ref"] = ref
                target = schema
                for sel in ref.split("#")[-1].split("/")[1:]:
                    _need(isinstance(target, dict) and sel in target,
                          f"Error resolving ref {ref}: {sel} not in {target}")
                    target = target[sel]
                self._refs[ref] = target
            # children too, also beside a new $ref (llama-cpp-python skips them: a root $ref's targets then keep
            # unresolved references)
            for k, v in list(n.items()):
                if k != "$ref":
                    visit(v)
            return n
        return visit(schema)

    def _resolve_ref(self, ref: str) -> str:
        name = ref.split("/")[-1]
        if name not in self._rules and ref not in self._resolving:
            _need(ref in self._refs, f"unresolved $ref {ref}")
            self._resolving.add(ref)
            name = self.visit(self._refs[ref], name)
            self._resolving.discard(ref)
        return name

    # ---- schemas
    def _union(self, name: str, alts: List[Any]) -> str:
        return " | ".join(self.visit(a, f"{name}{'-' if name else 'alternative-'}{i}") for i, a in enumerate(alts))

    def _const(self, value: Any) -> str:
        return self._format_literal(json.dumps(value))

    def visit(self, schema: Any, name: str) -> str:
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        _need(isinstance(schema, dict), f"a schema must be an object, got {type(schema).__name__}")
        t = schema.get("type")
        fmt = schema.get("format")
        rule_name = name + "-" if name in RESERVED else name or "root"
        if (ref := schema.get("$ref")) is not None:
            return self._add_rule(rule_name, self._resolve_ref(ref))
        if "oneOf" in schema or "anyOf" in schema:
            return self._add_rule(rule_name, self._union(name, schema.get("oneOf") or schema["anyOf"]))
        if isinstance(t, list):
            return self._add_rule(rule_name, self._union(name, [{"type": x} for x in t]))
        if "const" in schema:
            return self._add_rule(rule_name, self._const(schema["const"]))
        if "enum" in schema:
            return self._add_rule(rule_name, " | ".join(self._const(v) for v in schema["enum"]))
        if t in (None, "object") and ("properties" in schema or (
                "additionalProperties" in schema and schema["additionalProperties"] is not True)):
            return self._add_rule(rule_name, self._object(list(schema.get("properties", {}).items()),
                                                          set(schema.get("required", [])), name,
                                                          schema.get("additionalProperties")))
        if t in (None, "object") and "allOf" in schema:
            return self._add_rule(rule_name, self._all_of(schema["allOf"], name))
        if t in (None, "array") and ("items" in schema or "prefixItems" in schema):
            return self._add_rule(rule_name, self._array(schema, name))
        if t in (None, "string") and "pattern" in schema:
            return self._pattern(schema["pattern"], rule_name)
        if t in (None, "string") and re.match(r"^uuid[1-5]?$", fmt or ""):
            return self._add_primitive("root" if rule_name == "root" else fmt, PRIMITIVES["uuid"])
        if t in (None, "string") and f"{fmt}-string" in FORMATS:
            prim = f"{fmt}-string"
            return self._add_rule(rule_name, self._add_primitive(prim, FORMATS[prim]))
        if t == "string" and ("minLength" in schema or "maxLength" in schema):
            char = self._add_primitive("char", PRIMITIVES["char"])
            return self._add_rule(rule_name, r'"\"" ' + build_repetition(
                char, schema.get("minLength", 0), schema.get("maxLength")) + r' "\"" space')
        if t == "object" or len(schema) == 0:
            return self._add_rule(rule_name, self._add_primitive("object", PRIMITIVES["object"]))
        _need(isinstance(t, str) and t in PRIMITIVES, f"Unrecognized schema: {schema}")
        return self._add_primitive("root" if rule_name == "root" else t, PRIMITIVES[t])

    def _array(self, schema: dict, name: str) -> str:
        items = schema.get("items") or schema["prefixItems"]
        pre = f"{name}{'-' if name else ''}"
        if isinstance(items, list):
            return '"[" space ' + ' "," space '.join(
                self.visit(it, f"{pre}tuple-{i}") for i, it in enumerate(items)) + ' "]" space'
        item = self.visit(items, f"{pre}item")
        return '"[" space ' + build_repetition(item, schema.get("minItems", 0), schema.get("maxItems"),
                                               sep='"," space') + ' "]" space'

    def _all_of(self, members: List[Any], name: str) -> str:
        required: Set[str] = set()
        props: List[Tuple[str, Any]] = []

        def add(comp: dict, req: bool) -> None:
            if (ref := comp.get("$ref")) is not None:
                _need(ref in self._refs, f"unresolved $ref {ref}")
                comp = self._refs[ref]
            for k, v in comp.get("properties", {}).items():
                props.append((k, v))
                if req:
                    required.add(k)

        for m in members:
            if "anyOf" in m:
                for mm in m["anyOf"]:
                    add(mm, False)
            else:
                add(m, True)
        return self._object(props, required, name, [])

    def _object(self, props: List[Tuple[str, Any]], required: Set[str], name: str, additional: Any) -> str:
        order = self._prop_order
        ranked = [kv[0] for _, kv in sorted(enumerate(props), key=lambda ikv: (order.get(ikv[1][0], len(order)),
                                                                                ikv[0]))]
        pre = f"{name}{'-' if name else ''}"
        kv_rule: Dict[str, str] = {}
        for pname, pschema in props:
            value = self.visit(pschema, f"{pre}{pname}")
            kv_rule[pname] = self._add_rule(f"{pre}{pname}-kv",
                                            f'{self._const(pname)} space ":" space {value}')
        req = [k for k in ranked if k in required]
        opt = [k for k in ranked if k not in required]
        if additional is True or isinstance(additional, dict):
            sub = f"{pre}additional"
            value = self.visit({} if additional is True else additional, f"{sub}-value")
            kv_rule["*"] = self._add_rule(f"{sub}-kv", self._add_primitive("string", PRIMITIVES["string"])
                                          + f' ":" space {value}')
            opt.append("*")
        rule = '"{" space ' + ' "," space '.join(kv_rule[k] for k in req)
        if opt:
            rule += " ("
            if req:
                rule += ' "," space ( '

            def chain(ks: List[str], first_optional: bool) -> str:
                k, rest = ks[0], ks[1:]
                kv = kv_rule[k]
                if k == "*":
                    res = self._add_rule(f"{pre}additional-kvs", f'{kv} ( "," space ' + kv + " )*")
                elif first_optional:
                    res = f'( "," space {kv} )?'
                else:
                    res = kv
                if rest:
                    res += " " + self._add_rule(f"{pre}{k}-rest", chain(rest, True))
                return res

            rule += " | ".join(chain(opt[i:], False) for i in range(len(opt)))
            if req:
                rule += " )"
            rule += " )?"
        return rule + ' "}" space'

    # ---- patterns
    def _pattern(self, pattern: str, name: str) -> str:
        _need(isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$"),
              'Pattern must start with "^" and end with "$"')
        pat = pattern[1:-1]
        n = len(pat)
        sub_ids: Dict[str, str] = {}
        pos = 0

        def to_rule(item: Tuple[str, bool]) -> str:
            return '"' + item[0] + '"' if item[1] else item[0]

        def dot() -> str:
            return self._add_rule("dot", DOTALL if self._dotall else DOT)

        def seq_result(seq: List[Tuple[str, bool]]) -> Tuple[str, bool]:
            merged: List[Tuple[str, bool]] = []
            for item in seq:
                if item[1] and merged and merged[-1][1]:
                    merged[-1] = (merged[-1][0] + item[0], True)
                else:
                    merged.append(item)
            if len(merged) == 1:
                return merged[0]
            return " ".join(to_rule(x) for x in seq), False

        def group() -> Tuple[str, bool]:
            nonlocal pos
            start = pos
            seq: List[Tuple[str, bool]] = []
            while pos < n:
                c = pat[pos]
                if c == ".":
                    seq.append((dot(), False))
                    pos += 1
                elif c == "(":
                    pos += 1
                    _need(not (pos < n and pat[pos] == "?"),
                          f'Unsupported pattern syntax "{pat[pos] if pos < n else ""}" at index {pos} of /{pat}/')
                    seq.append((f"({to_rule(group())})", False))
                elif c == ")":
                    pos += 1
                    _need(start > 0 and pat[start - 1] == "(", f"Unbalanced parentheses in /{pat}/")
                    return seq_result(seq)
                elif c == "[":
                    cls = "["
                    pos += 1
                    while pos < n and pat[pos] != "]":
                        if pat[pos] == "\\" and pos + 1 < n:
                            e = pat[pos + 1]
                            if e in _CLASS_ESC:
                                cls += _CLASS_ESC[e]
                            else:
                                _need(e not in "DWS", f"unsupported regex escape \\{e} in a class of /{pat}/")
                                cls += _fix_escape(e, True)
                            pos += 2
                        else:
                            cls += pat[pos]
                            pos += 1
                    _need(pos < n, f"Unbalanced square brackets in /{pat}/")
                    seq.append((cls + "]", False))
                    pos += 1
                elif c == "|":
                    seq.append(("|", False))
                    pos += 1
                elif c in "*+?":
                    _need(bool(seq), f"nothing to repeat at index {pos} of /{pat}/")
                    seq[-1] = (to_rule(seq[-1]) + c, False)
                    pos += 1
                elif c == "{":
                    close = pat.find("}", pos)
                    _need(close >= 0, f"Unbalanced curly brackets in /{pat}/")
                    body = pat[pos + 1:close]
                    pos = close + 1
                    nums = [s.strip() for s in body.split(",")]
                    try:
                        if len(nums) == 1:
                            lo = int(nums[0])
                            hi: Optional[int] = lo
                        else:
                            _need(len(nums) == 2, f"Invalid quantifier {{{body}}} in /{pat}/")
                            lo = int(nums[0]) if nums[0] else 0
                            hi = int(nums[1]) if nums[1] else None
                    except ValueError:
                        raise SchemaError(f"Invalid quantifier {{{body}}} in /{pat}/") from None
                    _need(bool(seq), f"nothing to repeat at index {pos} of /{pat}/")
                    sub, lit = seq[-1]
                    if not lit:
                        rid = sub_ids.get(sub)
                        if rid is None:
                            rid = self._add_rule(f"{name}-{len(sub_ids) + 1}", sub)
                            sub_ids[sub] = rid
                        sub = rid
                    seq[-1] = (build_repetition(f'"{sub}"' if lit else sub, lo, hi, item_is_literal=lit), False)
                elif c == "\\" and pos + 1 < n and pat[pos + 1] in "dwsDWS":
                    e = pat[pos + 1]
                    cls = _CLASS_ESC[e.lower()]
                    seq.append((f"[{'^' if e.isupper() else ''}{cls}]", False))
                    pos += 2
                else:
                    lit = ""
                    while pos < n:
                        ch = pat[pos]
                        _need(not (ch == "\\" and pos == n - 1), f"a pattern cannot end with a backslash: /{pat}/")
                        if ch == "\\" and pos < n - 1:
                            e = pat[pos + 1]
                            if e in "dwsDWS":
                                break
                            if lit and pos + 2 < n and pat[pos + 2] in _QUANT:
                                break           # the escaped char alone takes the quantifier
                            lit += e if e in _UNESCAPE_IN_LITERAL else _fix_escape(e, False)
                            pos += 2
                        elif ch == '"' and not self._raw_pattern:
                            lit += '\\"'
                            pos += 1
                        elif ch not in _NOT_LITERAL and (pos == n - 1 or lit == "" or pat[pos + 1] == "."
                                                         or pat[pos + 1] not in _NOT_LITERAL):
                            lit += ch
                            pos += 1
                        else:
                            break
                    if lit:
                        seq.append((lit, True))
                    elif pos < n and pat[pos] in "}]":
                        raise SchemaError(f"unbalanced {pat[pos]!r} at index {pos} of /{pat}/")
            return seq_result(seq)

        body = to_rule(group())
        return self._add_rule(name, body if self._raw_pattern else '"\\"" ' + body + ' "\\"" space')


def json_schema_to_gbnf(schema: Union[str, dict, bool], prop_order: Optional[List[str]] = None) -> str:
    """GBNF for a JSON schema (a dict or JSON text), llama-cpp-python 0.3.36's text (see the module docstring).
    prop_order: property names to put first, in this order."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"the schema is not valid JSON: {e}") from None
    else:
        schema = json.loads(json.dumps(schema))      # a private copy: resolve_refs rewrites $ref in place
    order = {k: i for i, k in enumerate(prop_order or [])}
    conv = SchemaConverter(prop_order=order, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        schema = conv.resolve_refs(schema, "stdin")
        conv.visit(schema, "")
    except RecursionError:
        raise SchemaError("the schema nests too deeply") from None
    except (AttributeError, TypeError, KeyError) as e:
        raise SchemaError(f"unsupported schema: {type(e).__name__}: {e}") from None
    return conv.format_grammar()
