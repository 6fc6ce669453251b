"""llama_cpp.llama_grammar: grammars are not implemented in ubatch.llama_cpp (every entry point raises
NotImplementedError naming them)."""
from ubatch.llama_cpp.llama import LlamaGrammar  # noqa: F401

JSON_GBNF = r'''root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= ([ \t\n] ws)?
'''


def json_schema_to_gbnf(schema: str, prop_order=None) -> str:
    raise NotImplementedError("json_schema_to_gbnf: grammars (GBNF) are not implemented in ubatch.llama_cpp")
