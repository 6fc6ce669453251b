"""ToolPlan: what a chat request's `tools` / `tool_choice` (OpenAI's shapes) ask for, checked (ToolError naming
the field), and how the answer is read: the format showing the tools (ubatch.chat.tools.WithTools), the prompt
suffix opening a forced call, the assistant message with `tool_calls`, the streamed deltas. Used by ubatch serve
and ubatch.LLM.chat."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from ubatch.chat import tools as T

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolPlan:
    """What a request's tools ask for: the tools (None: answer in text), the forced tool's name, the prompt
    suffix that opens the answer for the model, the names a call may use."""

    def __init__(self, tools: Optional[List[dict]], choice: Any, parallel: Optional[bool] = None,
                 constrained: bool = False) -> None:
        self.tools = tools if tools and choice != "none" else None
        self.parallel = parallel is not False         # parallel_tool_calls: false keeps the first call
        self.choice = choice
        self.forced = T.forced_name(self.tools, choice) if self.tools else None
        self.required = self.tools is not None and self.forced is None and choice == "required"
        self.names = T.tool_names(self.tools) if self.tools else []
        self.args_head = ""        # the start of a forced call's arguments written for the model
        self.constrained = self.forced is not None and constrained
        self.calls_constrained = self.tools is not None and self.forced is None and constrained
        if self.forced is not None:
            schema = T.arguments_schema(self.tools, self.forced)
            if schema.get("type", "object") == "object":          # (small models write `5` or `a: 2` else)
                self.args_head = '{"' if schema.get("properties") else "{"
            self.prefix = T.forced_prefix(self.forced) + self.args_head
        elif self.required:
            self.prefix = T.OPEN + "\n"
        else:
            self.prefix = ""

    @property
    def active(self) -> bool:
        return self.tools is not None

    def chat_format(self, chat_format):
        """The server's chat format showing these tools (and opening a forced call), or itself without tools."""
        return T.WithTools(chat_format, self.tools, self.choice, self.prefix) if self.active else chat_format

    def sampling(self) -> Dict[str, Any]:
        """SamplingParams fields of a constrained forced call: the tool's schema, started by the opened text."""
        if not self.constrained:
            return {}
        return {"json_schema": self.schema(), "grammar_prefix": self.args_head or None}

    def calls_sampling(self) -> Dict[str, Any]:
        """SamplingParams fields of "auto" / "required" (no forced tool): the calls under a grammar of the tools'
        schemas (tools.calls_gbnf) — lazy for "auto" (free text until the model writes <tool_call>, the trigger
        word llama.cpp's server uses for this format, or opens its answer with a bare {"name": "<a tool>" object;
        then the rest of the answer is calls), from the opened
        <tool_call> of the prompt for "required". {} without the grammar engine or when a schema has no GBNF
        (the calls are then read unconstrained, as before)."""
        if not self.calls_constrained:
            return {}
        try:
            gbnf = T.calls_gbnf(self.tools, self.parallel)
        except (ValueError, KeyError, TypeError, RecursionError):
            return {}
        if self.required:
            return {"grammar": gbnf, "grammar_prefix": self.prefix}
        from ubatch.grammar.lazy import LazyGrammar
        return {"grammar": LazyGrammar(gbnf, trigger_words=[T.OPEN], trigger_patterns=[T.bare_call_pattern(self.tools)])}

    def schema(self) -> Optional[Dict[str, Any]]:
        return T.arguments_schema(self.tools, self.forced) if self.forced is not None else None

    # ---- answers ------------------------------------------------------------------------------------------
    def message(self, text: str, finish_reason: Optional[str]) -> Tuple[dict, Optional[str]]:
        """The assistant message of a generated text and the choice's finish_reason."""
        if self.forced is not None:
            calls = [{"name": self.forced, "arguments": T.forced_arguments(self.args_head + text)}]
            content = None
        else:
            content, calls = T.parse(self.prefix + text, self.names)
            if not self.parallel:
                calls = calls[:1]
        if not calls:
            return {"role": "assistant", "content": content or ""}, finish_reason
        msg = {"role": "assistant", "content": content,
               "tool_calls": [{"id": T.new_call_id(), "type": "function",
                               "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}
        return msg, ("length" if finish_reason == "length" else "tool_calls")

    def stream(self) -> "T.ToolStream":
        ts = T.ToolStream(self.names, self.forced, max_calls=None if self.parallel else 1)
        if self.required:
            ts.feed(self.prefix)
        elif self.args_head:
            ts.text = self.args_head              # the arguments' start, sent with the first delta
        return ts


class ToolError(ValueError):
    """A malformed tools / tool_choice; .param names the field (tools.0.function.name, tool_choice, ...)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _bad(msg: str, param: str) -> ToolError:
    return ToolError(msg, param)


def check(tools: Any, tool_choice: Any, parallel_tool_calls: Optional[bool] = None,
          constrained: bool = False) -> ToolPlan:
    """OpenAI's rules: each tool {"type": "function", "function": {"name", "description"?, "parameters"?}},
    unique names of [A-Za-z0-9_-]{1,64}; tool_choice "none" | "auto" | "required" | {"type": "function",
    "function": {"name"}} naming a given tool (and only with tools)."""
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools: expected a list of tools", "tools")
        seen = set()
        for i, t in enumerate(tools):
            where = f"tools.{i}"
            if not isinstance(t, dict) or t.get("type") != "function":
                raise _bad(f"{where}: a tool must be {{\"type\": \"function\", \"function\": {{...}}}}", where)
            f = t.get("function")
            if not isinstance(f, dict):
                raise _bad(f"{where}.function: expected an object with a name", f"{where}.function")
            name = f.get("name")
            if not isinstance(name, str) or not _NAME.match(name):
                raise _bad(f"{where}.function.name: a function name is 1 to 64 letters, digits, '_' or '-', "
                           f"got {name!r}", f"{where}.function.name")
            if name in seen:
                raise _bad(f"{where}.function.name: {name!r} is given twice", f"{where}.function.name")
            seen.add(name)
            if "parameters" in f and not isinstance(f["parameters"], dict):
                raise _bad(f"{where}.function.parameters: expected a JSON schema object",
                           f"{where}.function.parameters")
            if "description" in f and not isinstance(f["description"], str):
                raise _bad(f"{where}.function.description: expected a string", f"{where}.function.description")
        if not tools:
            tools = None
    if tool_choice is None:
        tool_choice = "auto" if tools else "none"
    elif isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise _bad(f"tool_choice: expected 'none', 'auto', 'required' or a function, got {tool_choice!r}",
                       "tool_choice")
        if tool_choice != "none" and not tools:
            raise _bad(f"tool_choice: {tool_choice!r} needs tools", "tool_choice")
    elif isinstance(tool_choice, dict):
        f = tool_choice.get("function")
        if tool_choice.get("type") != "function" or not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise _bad("tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        if not tools or f["name"] not in {t["function"]["name"] for t in tools}:
            raise _bad(f"tool_choice: no tool named {f['name']!r} in tools", "tool_choice")
    else:
        raise _bad(f"tool_choice: expected a string or an object, got {type(tool_choice).__name__}", "tool_choice")
    return ToolPlan(tools, tool_choice, parallel_tool_calls, constrained)
