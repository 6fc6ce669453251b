"""Tool calls for ubatch serve's /v1/chat/completions (OpenAI's `tools` / `tool_choice` -> `tool_calls`), in the
Hermes / Qwen 2.5 convention: a call is `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`.

* Prompt: the tools go to the chat format (a GGUF template such as Qwen 2.5's renders them itself); a format
  whose template does not mention `tools` gets a system message listing them and the call syntax, and the
  conversation's earlier calls / tool results written out in the same syntax.
* Forced call (tool_choice naming a function, or "required" with one tool): the answer is opened for the model,
  `<tool_call>\\n{"name": "NAME", "arguments": {"` ending the prompt (`{"` for an object schema with
  properties, `{` without, nothing for other schemas), so what it generates is the arguments; with a grammar
  engine they are sampled under the tool's JSON schema.
* Parsing: the `<tool_call>` blocks of the generated text (a closing tag may be missing at the end), or a whole
  answer that is one {"name", "arguments"} object naming a known tool; the rest is the message content.
* Streaming: ToolStream turns text deltas into OpenAI's content / tool_calls deltas (a possible `<tool_call>`
  prefix is held back; a forced call's arguments are streamed as they come and end with their JSON value)."""
from __future__ import annotations

import json
import secrets
from typing import Any, Dict, List, Optional, Tuple

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def tool_names(tools: List[dict]) -> List[str]:
    return [t["function"]["name"] for t in tools]


def system_prompt(tools: List[dict]) -> str:
    """The tools and the call syntax, for formats whose template knows no tools (Qwen 2.5's wording)."""
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            f"{listing}\n</tools>\n\nFor each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>")


def knows_tools(chat_format) -> bool:
    """The format renders `tools` itself (a Jinja template that mentions them)."""
    tpl = getattr(getattr(chat_format, "formatter", None), "template", None)
    return isinstance(tpl, str) and "tools" in tpl


def _call_text(call: dict) -> str:
    f = call.get("function", call)
    args = f.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return f"{OPEN}\n" + json.dumps({"name": f.get("name"), "arguments": args}, ensure_ascii=False) + f"\n{CLOSE}"


def written_out(messages: List[dict], tools: List[dict]) -> List[dict]:
    """The conversation for a format that knows no tools: the tool listing merged into (or put before) the
    first system message, earlier calls as <tool_call> text, tool results as <tool_response> user turns."""
    out: List[dict] = []
    listing = system_prompt(tools) if tools else None
    for m in messages:
        m = dict(m)
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            m["content"] = ((m.get("content") or "") + ("\n" if m.get("content") else "") + calls)
            m.pop("tool_calls")
        elif m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
        out.append(m)
    if listing is not None:
        if out and out[0]["role"] == "system":
            out[0] = dict(out[0], content=(out[0].get("content") or "") + "\n\n" + listing)
        else:
            out.insert(0, {"role": "system", "content": listing})
    return out


def render(chat_format, messages: List[dict], tools: Optional[List[dict]], tool_choice: Any = None):
    """The conversation rendered with the tools (see the module text). tool_choice "none": no tools shown."""
    if not tools or tool_choice == "none":
        tools = None
    if knows_tools(chat_format):
        return chat_format(messages, tools=tools, tool_choice=tool_choice)
    return chat_format(written_out(messages, tools or []))


class WithTools:
    """A chat format that shows `tools` to the model (render) and ends the prompt with `prefix` (a forced
    call opened): a ChatFormat itself (name, called with the messages), so whatever tokenizes a ChatFormat's
    rendering treats the tool text as the format's markup."""

    def __init__(self, chat_format, tools: Optional[List[dict]], tool_choice: Any = None, prefix: str = "") -> None:
        self.chat_format, self.tools, self.tool_choice, self.prefix = chat_format, tools, tool_choice, prefix
        self.name = getattr(chat_format, "name", "?")

    def __call__(self, messages: List[dict], **kwargs: Any):
        r = render(self.chat_format, messages, self.tools, self.tool_choice)
        r.prompt += self.prefix
        return r


def forced_name(tools: Optional[List[dict]], tool_choice: Any) -> Optional[str]:
    """The tool a request forces: tool_choice {"type": "function", "function": {"name"}}, or "required" with
    a single tool."""
    if isinstance(tool_choice, dict):
        return tool_choice["function"]["name"]
    if tool_choice == "required" and tools and len(tools) == 1:
        return tools[0]["function"]["name"]
    return None


def forced_prefix(name: str) -> str:
    """The opened answer of a forced call: the model continues with the arguments."""
    return f'{OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '


def arguments_schema(tools: List[dict], name: str) -> Dict[str, Any]:
    for t in tools:
        if t["function"]["name"] == name:
            return t["function"].get("parameters") or {"type": "object"}
    raise KeyError(name)


def calls_gbnf(tools: List[dict], parallel: bool = True) -> str:
    """GBNF of the tool calls an answer may make: `<tool_call>`, white space, one
    {"name": NAME, "arguments": ARGS} object with ARGS under that tool's parameters schema (llama-cpp-python's
    converter), white space, `</tool_call>`; several such blocks when parallel; or one bare
    call object (what `parse` also reads as a call). ValueError when a schema has no GBNF."""
    import re
    from ubatch.grammar.schema import json_schema_to_gbnf
    alts = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                              "arguments": arguments_schema(tools, t["function"]["name"])},
             "required": ["name", "arguments"]} for t in tools]
    body = json_schema_to_gbnf(alts[0] if len(alts) == 1 else {"anyOf": alts})
    body, n = re.subn(r"(?m)^root ::=", "tool-call-json ::=", body)
    if n != 1:
        raise ValueError("the tools' schemas gave no single root rule")
    blocks = "tool-call-block (tool-call-ws tool-call-block)* tool-call-ws" if parallel else \
        "tool-call-block tool-call-ws"
    return (f"root ::= {blocks} | tool-call-json tool-call-ws\n"
            f'tool-call-block ::= "<tool_call>" tool-call-ws tool-call-json tool-call-ws "</tool_call>"\n'
            f"tool-call-ws ::= [ \\t\\n]*\n{body}")


def bare_call_pattern(tools: List[dict]) -> bytes:
    """A trigger pattern (full match, llama.cpp's PATTERN_FULL reading) for an answer that opens as a bare call
    object naming a tool: white space, then `{"name": "NAME"` spaced as the grammar's JSON may be (its group:
    where the grammar starts, so the grammar always takes what triggered it)."""
    import re
    names = "|".join(re.escape(n) for n in tool_names(tools))
    return ('^\\s*(\\{ ?"name" ?: ?"(?:' + names + ')")[\\s\\S]*$').encode()


def json_value_end(text: str) -> Optional[int]:
    """Where the first JSON value of `text` (after white space) ends, or None while it is incomplete or not
    JSON. Linear: strings, escapes and nesting are followed once."""
    i, n = 0, len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    if i == n:
        return None
    if text[i] not in "{[\"":
        try:
            _, end = json.JSONDecoder().raw_decode(text, i)     # a bare number / literal
        except ValueError:
            return None
        return end if end < n else None                       # "12" may still grow into "123"
    depth, in_str, esc = 0, False, False
    for j in range(i, n):
        c = text[j]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
                if depth == 0:
                    return j + 1
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _arguments_text(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _as_call(obj: Any, names: List[str]) -> Optional[dict]:
    if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"] in names:
        args = obj.get("arguments", obj.get("parameters", {}))
        return {"name": obj["name"], "arguments": _arguments_text(args)}
    return None


def parse(text: str, names: List[str]) -> Tuple[Optional[str], List[dict]]:
    """(content, calls) of a generated answer; calls are {"name", "arguments" (JSON text)}. A block that is not
    a call of a known tool stays in the content."""
    calls: List[dict] = []
    content: List[str] = []
    pos = 0
    while True:
        a = text.find(OPEN, pos)
        if a < 0:
            content.append(text[pos:])
            break
        content.append(text[pos:a])
        b = text.find(CLOSE, a + len(OPEN))
        body = text[a + len(OPEN):b if b >= 0 else len(text)]
        end = json_value_end(body)
        call = None
        if end is not None:
            try:
                call = _as_call(json.loads(body[:end]), names)
            except ValueError:
                call = None
        if call is None:
            content.append(text[a:b + len(CLOSE)] if b >= 0 else text[a:])
        else:
            calls.append(call)
        if b < 0:
            break
        pos = b + len(CLOSE)
    rest = "".join(content).strip()
    if not calls and rest.startswith("{"):
        end = json_value_end(rest)
        if end is not None and rest[end:].strip() == "":
            try:
                call = _as_call(json.loads(rest[:end]), names)
            except ValueError:
                call = None
            if call is not None:
                return None, [call]
    return (rest or None), calls


def forced_arguments(text: str) -> str:
    """The arguments a forced call generated: its first JSON value (the whole text when it never completes)."""
    end = json_value_end(text)
    return (text[:end] if end is not None else text).strip()


class ToolStream:
    """Text deltas of one choice -> OpenAI chat deltas. Forced: the arguments, streamed until their JSON value
    ends. Auto: content, holding back a possible start of <tool_call>; once a call starts (or the answer opens
    with "{", a possible bare call), the rest is kept and parsed at the end (the calls then go out with their
    names and arguments, or the kept text as content)."""

    def __init__(self, names: List[str], forced: Optional[str] = None, max_calls: Optional[int] = None) -> None:
        self.names, self.forced, self.max_calls = names, forced, max_calls
        self.text = ""
        self.sent = 0              # characters of self.text given out (content or arguments)
        self.calling = False       # auto: a <tool_call> has started
        self.done = False          # forced: the arguments' JSON value is complete
        self.n_calls = 0
        self.id = new_call_id() if forced else None
        self.started = False

    def feed(self, delta: str) -> List[dict]:
        self.text += delta
        if self.forced is not None:
            return self._feed_forced()
        if self.calling:
            return []
        if self.sent == 0:                      # an answer that may be one bare {"name", "arguments"} object
            head = self.text.lstrip()
            if head == "":
                return []
            if head.startswith("{"):
                self.calling = True
                return []
        k = self.text.find(OPEN)
        if k >= 0:
            self.calling = True
            out = self._content(self.text[self.sent:k])
            self.sent = k
            return out
        hold = 0
        for j in range(1, len(OPEN)):
            if self.text.endswith(OPEN[:j]):
                hold = j
        upto = len(self.text) - hold
        out = self._content(self.text[self.sent:upto])
        self.sent = max(self.sent, upto)
        return out

    def _content(self, s: str) -> List[dict]:
        return [{"content": s}] if s else []

    def _feed_forced(self) -> List[dict]:
        out: List[dict] = []
        if not self.started:
            self.started = True
            out.append({"tool_calls": [{"index": 0, "id": self.id, "type": "function",
                                        "function": {"name": self.forced, "arguments": ""}}]})
        if self.done:
            return out
        end = json_value_end(self.text)
        upto = end if end is not None else len(self.text)
        piece = self.text[self.sent:upto]
        if self.sent == 0:
            piece = piece.lstrip()
        self.sent = upto
        if end is not None:
            self.done = True
        if piece:
            out.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        return out

    def finish(self) -> Tuple[List[dict], bool]:
        """The deltas still to send at the end, and whether the answer was a tool call."""
        if self.forced is not None:
            out = [] if self.started else self._feed_forced()
            return out, True
        if not self.calling:
            return self._content(self.text[self.sent:]), False
        content, calls = parse(self.text[self.sent:], self.names)
        calls = calls[:self.max_calls] if self.max_calls is not None else calls
        out = self._content(content or "") if content else []
        for i, c in enumerate(calls):
            out.append({"tool_calls": [{"index": i, "id": new_call_id(), "type": "function",
                                        "function": {"name": c["name"], "arguments": c["arguments"]}}]})
        return out, bool(calls)
