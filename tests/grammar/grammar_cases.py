"""The grammars and strings of the allowed-token recordings (tests/data/grammar/allowed_*.json.gz, made by
tests/grammar/record_grammar.py with llama-cpp-python 0.3.36): llama.cpp's grammars/ folder (copied into
tests/data/grammar/gbnf, MIT, from llama.cpp 0c1e570 as vendored in the llama-cpp-python 0.3.36 sdist), grammars
written here for the engine's corners, and GBNF made from JSON schemas by llama-cpp-python's converter."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
GBNF_DIR = os.path.join(DATA, "grammar", "gbnf")


def gbnf(name: str) -> str:
    with open(os.path.join(GBNF_DIR, name + ".gbnf"), encoding="utf-8") as f:
        return f.read()


# name -> (grammar text or "@file", valid strings)
FILE_CASES = {
    "arithmetic": ["x = 3\n", "(a+b1)*22=  q_9\n1+2=3\n"],
    "c": ["int main(){return 0;}", "float f(int x){while(x<10){x = x+1;}// hi\nreturn x*2;}"],
    "chess": ["1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n"],
    "english": ["Hello, world! This is 42.", "a\tb\nc (d) [e] {f}"],
    "japanese": ["こんにちは 世界", "カタカナ、ひらがな。漢字"],
    "json": ['{"a": [1, 2.5e3, true, null], "b\\u00e9": {"c": "d\\n"}}', '{}', '{"k":"v\u00e9\u65e5"}'],
    "json_arr": ['[\n{"a": 1},\n"x",\n[1, 2]]', '[\n]'],
    "list": ["- one\n- two \u00e9\u65e5\n", "- x\n"],
}

OWN_CASES = {
    # repetitions, char classes, negation, any-char, nested groups
    "reps": (r'''root ::= "a"{2} "b"{1,3} "c"{2,} ("d" | "e"){0,2} [x-z]? "!"''', ["aabccc!", "aabbbccdz!", "aabcce!"]),
    "classes": (r'''root ::= [^a-z\u00e9] [a\-z] [\]] . [\x41-\x5a]+ "\t" [^\n]* "\n"''',
                ["Qa]\u65e5ABC\t\u00e9 x\n", "!-]xZ\t\n"]),
    # UTF-8: multi-byte literals and ranges (tokens split inside code points), a negated multi-byte class
    "utf8": ('root ::= ("\u65e5\u672c" | [\u00c0-\u00ff]+ | [^\\x00-\\xff]) (" " root)?',
             ["\u65e5\u672c \u00e9\u00e8 \U0001F600", "\u00c0\u00ff\u00c1 \u4e2d"]),
    # empty alternatives, optional groups, deep nesting
    "nested": (r'''root ::= item ("," item)*
item ::= "(" item? ")" | word
word ::= [a-z]+ | ''', ["(()),abc,((x))", ",,", "((((a))))"]),
    # comments and CRLF line ends, names with digits and dashes
    "layout": ("root ::= a-1 b2 # comment\r\na-1 ::= \"x\" |\r\n  \"y\"\nb2 ::= \"z\"* ", ["xzz", "y"]),
}

# cases whose grammar contains tokens: per model (the ids are the vocabulary's)
TOKEN_CASES = {
    "gemma3-270m": {
        "tokens_id": (r'''root ::= "a" <[236764]> "b" | !<[236746]> "c"*''', None),
        "tokens_text": (r'''root ::= <start_of_turn> "user" (!<start_of_turn>)* <start_of_turn>''',
                        ["<start_of_turn>user\nhello there<start_of_turn>"]),
    },
    "qwen2.5-0.5b": {
        "tokens_id": (r'''root ::= "a" <[64]> "b" | !<[64]> "c"*''', None),
        "tokens_text": (r'''root ::= <|im_start|> "user" (!<|im_start|>)* <|im_start|>''',
                        ["<|im_start|>user\nhello there<|im_start|>"]),
    },
}

# JSON schemas, converted by llama-cpp-python 0.3.36's json_schema_to_gbnf (text recorded in
# tests/data/grammar/converter.json.gz) and used for allowed sets with an instance each
SCHEMAS = {
    "person": ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                                 "email": {"type": "string", "format": "email"}},
                "required": ["name", "age"]},
               ['{"name": "Ann", "age": 31}', '{"name":"B\\"o","age":-2,"email":"x@y.z"}']),
    "enum_array": ({"type": "array", "items": {"enum": ["red", "green", 3, None]}, "minItems": 1, "maxItems": 3},
                   ['["red", 3]', '[null]']),
    "formats": ({"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                                  "t": {"type": "string", "format": "time"},
                                                  "u": {"type": "string", "format": "uuid"},
                                                  "dt": {"type": "string", "format": "date-time"}},
                 "required": ["d", "t", "u", "dt"], "additionalProperties": False},
                ['{"d": "2024-01-31", "t": "12:30:00Z", "u": "123e4567-e89b-12d3-a456-426614174000", '
                 '"dt": "2024-01-31T12:30:00.500+01:00"}']),
    "refs": ({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                               "required": ["x", "y"]}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"type": "array",
                                                                                   "items": {"$ref": "#/$defs/pt"}}}},
             ['{"a": {"x": 1, "y": 2.5}, "b": [{"x": 0, "y": -1e3}]}', '{}']),
    "prefix_items": ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                      "items": False}, ['["a", true]']),
    "pattern": ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,4}$"}, ['"AB-1234"', '"QQ-000"']),
    "any_of": ({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"k": {"const": "v"}},
                                                "required": ["k"]}]}, ['42', '{"k": "v"}']),
    "strings": ({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}},
                 "required": ["s"], "additionalProperties": {"type": "integer"}},
                ['{"s": "abc", "z": 3}', '{"s": "\\u00e9\\u00e9"}']),
}

# converter text only (tests/data/grammar/converter.json.gz); the last ones are where llama-cpp-python's text is
# broken (BROKEN: ubatch's differs there, see ubatch/grammar/schema.py)
CONVERTER_ONLY = {
    "empty": {},
    "types_list": {"type": ["string", "null"]},
    "nested_arrays": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
                      "minItems": 2},
    "tuple_min": {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3},
    "unbounded_min": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
    "opt_props": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"},
                                                   "c": {"type": "boolean"}}, "required": ["b"]},
    "all_of": {"allOf": [{"properties": {"x": {"type": "integer"}}},
                         {"anyOf": [{"properties": {"y": {"type": "string"}}}]}]},
    "additional_true": {"type": "object", "properties": {"k": {"type": "null"}}, "additionalProperties": True},
    "additional_false_only": {"type": "object", "additionalProperties": False},
    "uuid_root": {"type": "string", "format": "uuid"},
    "pattern_groups": {"type": "string", "pattern": "^(ab|cd)+[0-9]{2,}x?(yz){1,2}$"},
    "pattern_dot_lit": {"type": "string", "pattern": "^a.b{3}[^q]*$"},
    "pattern_quote": {"type": "string", "pattern": '^"[a-z]+"\\-\\t$'},
    "reserved_names": {"type": "object", "properties": {"number": {"type": "number"}, "root": {"type": "string"},
                                                        "value": {"type": "integer"}}},
    "names_escaped": {"type": "object", "properties": {"a b/c": {"type": "integer"}, "d.e": {"const": 1}}},
    "enum_mixed": {"enum": [1, "two", None, True, 2.5, {"o": 1}, [1]]},
    "one_of_refs": {"$defs": {"a": {"type": "integer"}, "b": {"type": "string"}},
                    "oneOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]},
    "recursive": {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                       "next": {"$ref": "#/$defs/node"}}}},
                  "type": "object", "properties": {"head": {"$ref": "#/$defs/node"}}},
    "date_time": {"type": "string", "format": "date-time"},
    "string_len": {"type": "string", "minLength": 1, "maxLength": 3},
    "BROKEN_regex_escape": {"type": "string", "pattern": "^\\d{3}\\.\\w+$"},
    "BROKEN_quote_in_name": {"type": "object", "properties": {'a"b': {"type": "integer"}}, "required": ['a"b']},
    "BROKEN_backslash_enum": {"enum": ["a\\b", "line\nbreak"]},
    "BROKEN_root_ref": {"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
        "c": {"$ref": "#/$defs/n"}}}}},
}
