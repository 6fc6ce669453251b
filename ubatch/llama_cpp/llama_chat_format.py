"""llama_cpp.llama_chat_format (0.3.36): chat completion handlers by name. Every format llama-cpp-python
registers (ubatch.chat.formats: the same prompt text), the GGUF's templates through Jinja2ChatFormatter, the
function-calling handlers (chatml-function-calling, functionary, functionary-v1 / -v2: ubatch.llama_cpp.
_chat_tools), register_chat_format / register_chat_completion_handler / get_chat_completion_handler, and the
guess of a format from GGUF metadata. A handler renders the conversation, tokenizes it as llama-cpp-python does
and runs Llama.create_completion; tools: a forced tool's arguments are sampled under its JSON schema's grammar
(llama_grammar.LlamaGrammar.from_json_schema). The multimodal (llava / mtmd) handler classes exist and raise
NotImplementedError."""
from __future__ import annotations

import json
import sys
from datetime import datetime  # noqa: F401  (these names as 0.3.36's module has them)
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Protocol, Tuple, Union, cast  # noqa: F401

from jinja2.ext import Extension  # noqa: F401
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: F401

from ubatch.llama_cpp._logger import logger  # noqa: F401
from ubatch.llama_cpp._utils import Singleton, suppress_stdout_stderr  # noqa: F401

from ubatch.chat import formats as _formats
from ubatch.chat.jinja_formatter import JinjaChatFormat
from ubatch.chat.resolve import (CHATML_BOS_TOKEN, CHATML_CHAT_TEMPLATE, CHATML_EOS_TOKEN,  # noqa: F401
                                 LLAMA3_INSTRUCT_CHAT_TEMPLATE, MISTRAL_INSTRUCT_BOS_TOKEN,
                                 MISTRAL_INSTRUCT_CHAT_TEMPLATE, MISTRAL_INSTRUCT_EOS_TOKEN,
                                 MIXTRAL_INSTRUCT_CHAT_TEMPLATE, format_gemma3,
                                 guess_chat_format_from_gguf_metadata)
from ubatch.chat.response import ChatFormatterResponse
from ubatch.llama_cpp import _chat_convert
from ubatch.llama_cpp._chat_convert import (chunks_to_chat, completion_to_chat,  # noqa: F401
                                            completion_to_chat_function, text_to_chat)

# llama-cpp-python's private names for the conversions (imported by some third-party handlers)
_convert_text_completion_logprobs_to_chat = _chat_convert.logprobs_to_chat
_convert_text_completion_to_chat = text_to_chat
_convert_text_completion_chunks_to_chat = chunks_to_chat
_convert_completion_to_chat = completion_to_chat
_convert_completion_to_chat_function = completion_to_chat_function


class LlamaChatCompletionHandler(Protocol):
    """handler(*, llama, messages, functions, function_call, tools, tool_choice, sampling..., stream, ...) ->
    a chat completion dict, or an iterator of chunks when stream=True."""

    def __call__(self, *, llama, messages: List[dict], **kwargs: Any) -> Any: ...


class ChatFormatter(Protocol):
    def __call__(self, *, messages: List[dict], **kwargs: Any) -> ChatFormatterResponse: ...


class LlamaChatCompletionHandlerNotFoundException(Exception):
    pass


class LlamaChatCompletionHandlerRegistry:
    """The process-wide handler registry (every instance shares one table, as llama-cpp-python's singleton)."""

    _chat_handlers: Dict[str, Callable] = {}

    def register_chat_completion_handler(self, name: str, chat_handler: Callable, overwrite: bool = False) -> None:
        if not overwrite and name in self._chat_handlers:
            raise ValueError(f"Formatter with name '{name}' is already registered. Use `overwrite=True` to "
                             f"overwrite it.")
        self._chat_handlers[name] = chat_handler

    def unregister_chat_handler(self, name: str) -> None:
        if name not in self._chat_handlers:
            raise ValueError(f"No formatter registered under the name '{name}'.")
        del self._chat_handlers[name]

    def get_chat_completion_handler_by_name(self, name: str) -> Callable:
        try:
            return self._chat_handlers[name]
        except KeyError:
            raise LlamaChatCompletionHandlerNotFoundException(
                f"Invalid chat handler: {name} (valid formats: {list(self._chat_handlers.keys())})") from None


def get_chat_completion_handler(name: str) -> Callable:
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str):
    def decorator(f):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, f)
        return f
    return decorator


# ---- grammars -----------------------------------------------------------------------------------------------------
def _grammar_for_json(verbose: bool = False):
    from ubatch.llama_cpp import llama_grammar
    return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=verbose)


def _grammar_for_json_schema(schema: str, verbose: bool = False, fallback_to_json: bool = True):
    from ubatch.llama_cpp import llama_grammar
    try:
        return llama_grammar.LlamaGrammar.from_json_schema(schema, verbose=verbose)
    except NotImplementedError:
        raise
    except Exception:
        if fallback_to_json:
            return _grammar_for_json(verbose=verbose)
        raise


def _grammar_for_response_format(response_format, verbose: bool = False):
    if response_format["type"] != "json_object":
        return None
    if "schema" in response_format:
        return _grammar_for_json_schema(json.dumps(response_format["schema"]), verbose=verbose)
    return _grammar_for_json(verbose=verbose)


def _grammar_for_tool(tool: dict, verbose: bool = False):
    """The grammar of a forced tool's arguments: its parameters' JSON schema, JSON when that does not convert."""
    try:
        return _grammar_for_json_schema(json.dumps(tool["function"]["parameters"]), verbose=verbose)
    except NotImplementedError:
        raise
    except Exception as e:
        if verbose:
            print(f"Failed to parse function body as JSON schema, falling back to default grammar\n{e}",
                  file=sys.stderr)
        return _grammar_for_json(verbose=verbose)


# ---- formatter -> handler -----------------------------------------------------------------------------------------
def _merge_stop(stop, extra) -> Optional[List[str]]:
    """The request's stop strings, then the format's (an empty one, the eos text of a vocabulary without EOS,
    is left out: it would end every completion before its first token)."""
    if extra is None:
        return stop
    stop = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    return stop + [s for s in (extra if isinstance(extra, list) else [extra]) if s != ""]


def legacy_to_tools(functions, function_call, tools, tool_choice):
    """OpenAI's deprecated functions / function_call as tools / tool_choice (they win when given)."""
    if functions is not None:
        tools = [{"type": "function", "function": f} for f in functions]
    if function_call is not None:
        if isinstance(function_call, str) and function_call in ("none", "auto"):
            tool_choice = function_call
        if isinstance(function_call, dict) and "name" in function_call:
            tool_choice = {"type": "function", "function": {"name": function_call["name"]}}
    return tools, tool_choice


class Jinja2ChatFormatter(JinjaChatFormat):
    """llama-cpp-python's Jinja2ChatFormatter(template, eos_token, bos_token, add_generation_prompt=True,
    stop_token_ids=None): the chat template rendered as ubatch.chat.jinja_formatter.JinjaChatFormat renders it,
    and to_chat_handler()."""

    def to_chat_handler(self) -> Callable:
        return chat_formatter_to_chat_completion_handler(self)

def chat_formatter_to_chat_completion_handler(chat_formatter) -> Callable:
    """A completion handler rendering with `chat_formatter`: the format's stop strings added to the request's,
    response_format json_object -> the JSON (schema) grammar, a forced tool (tool_choice naming a function) ->
    its schema's grammar and a tool_calls answer."""

    def chat_completion_handler(*, llama, messages, functions=None, function_call=None, tools=None,
                                tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                                min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False, stop=[],
                                seed=None, response_format=None, max_tokens=None, presence_penalty: float = 0.0,
                                frequency_penalty: float = 0.0, repeat_penalty: float = 1.1, tfs_z: float = 1.0,
                                mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                                model=None, logits_processor=None, grammar=None, logit_bias=None, logprobs=None,
                                top_logprobs=None, **kwargs):
        result = chat_formatter(messages=messages, functions=functions, function_call=function_call, tools=tools,
                                tool_choice=tool_choice, **kwargs)
        prompt = llama.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)
        stop = _merge_stop(stop, result.stop)
        if response_format is not None and response_format["type"] == "json_object":
            grammar = _grammar_for_response_format(response_format, verbose=llama.verbose)
        tools, tool_choice = legacy_to_tools(functions, function_call, tools, tool_choice)
        tool = None
        if tool_choice is not None and isinstance(tool_choice, dict) and tools is not None:
            name = tool_choice["function"]["name"]
            tool = next((t for t in tools if t["function"]["name"] == name), None)
            if tool is None:
                raise ValueError(f"Tool choice '{name}' not found in tools.")
            grammar = _grammar_for_tool(tool, verbose=llama.verbose)
        out = llama.create_completion(prompt=prompt, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                                      typical_p=typical_p, logprobs=top_logprobs if logprobs else None,
                                      stream=stream, stop=stop, seed=seed, max_tokens=max_tokens,
                                      presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                                      repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                                      mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                                      logits_processor=logits_processor, stopping_criteria=result.stopping_criteria,
                                      grammar=grammar, logit_bias=logit_bias)
        if tool is not None:
            return completion_to_chat_function(tool["function"]["name"], out, stream)
        return completion_to_chat(out, stream=stream)

    return chat_completion_handler


def register_chat_format(name: str):
    """Registers a formatter (messages=..., **kw) -> ChatFormatterResponse under `name`: as a completion handler
    for Llama(chat_format=name), and as a format ubatch.LLM.chat / ubatch serve can be given."""
    def decorator(f):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
            name, chat_formatter_to_chat_completion_handler(f))
        _formats.register(name, f)
        return f
    return decorator


# ---- Hugging Face tokenizers as formatters ----------------------------------------------------------------------
def hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path):
    from transformers import AutoTokenizer  # the optional dependency llama-cpp-python also asks for

    tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path)

    def format_autotokenizer(messages, **kwargs: Any) -> ChatFormatterResponse:
        tokenizer.use_default_system_prompt = False
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
        assert isinstance(prompt, str)
        return ChatFormatterResponse(prompt=prompt, stop=tokenizer.eos_token, added_special=True)

    return format_autotokenizer


def hf_autotokenizer_to_chat_completion_handler(pretrained_model_name_or_path):
    return chat_formatter_to_chat_completion_handler(hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path))


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: Dict[str, Any], add_generation_prompt: bool = True):
    """A tokenizer_config.json's chat_template, rendered as llama-cpp-python renders it: a plain sandboxed
    environment, and an empty assistant message appended instead of add_generation_prompt."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    assert isinstance(tokenizer_config, dict)
    for key in ("chat_template", "bos_token", "eos_token"):
        assert key in tokenizer_config and isinstance(tokenizer_config[key], str)
    bos, eos = tokenizer_config["bos_token"], tokenizer_config["eos_token"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        tokenizer_config["chat_template"])

    def format_tokenizer_config(messages, **kwargs: Any) -> ChatFormatterResponse:
        if add_generation_prompt:
            messages = [*messages, {"role": "assistant", "content": ""}]
        prompt = env.render(messages=messages, bos_token=bos, eos_token=eos, **kwargs)
        return ChatFormatterResponse(prompt=prompt, stop=[eos, bos], added_special=True)

    return format_tokenizer_config


def hf_tokenizer_config_to_chat_completion_handler(tokenizer_config: Dict[str, Any],
                                                   add_generation_prompt: bool = True):
    return chat_formatter_to_chat_completion_handler(
        hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt=add_generation_prompt))


# ---- llama-cpp-python's private format helpers (some third-party formats call them) ------------------------------
def _get_system_message(messages) -> str:
    return _formats.system_text(messages)


def _map_roles(messages, role_map):
    return _formats.turns(messages, role_map)


def _format_llama2(system_message, messages, sep, sep2) -> str:
    return _formats.join_llama2(system_message, messages, sep, sep2)


def _format_add_colon_single(system_message, messages, sep) -> str:
    return _formats.join_colon(system_message, messages, sep)


def _format_add_colon_two(system_message, messages, sep, sep2) -> str:
    return _formats.join_colon(system_message, messages, sep, sep2)


def _format_no_colon_single(system_message, messages, sep) -> str:
    return _formats.join_plain(system_message, messages, sep)


def _format_add_colon_space_single(system_message, messages, sep) -> str:
    return _formats.join_colon(system_message, messages, sep, open_end=": ")


def _format_chatml(system_message, messages, sep) -> str:
    return _formats.join_lines(system_message, messages, sep)


def _format_chatglm3(system_message, messages, sep) -> str:
    return _formats.join_glm(system_message, messages)


# ---- the registered formats ---------------------------------------------------------------------------------------
for _name, _f in list(_formats.FORMATTERS.items()):
    register_chat_format(_name)(_f)

format_llama2 = _formats.format_llama2
format_llama3 = _formats.format_llama3
format_alpaca = _formats.format_alpaca
format_qwen = _formats.format_qwen
format = _formats.format_vicuna            # llama-cpp-python's name for its vicuna formatter
format_vicuna = _formats.format_vicuna
format_oasst_llama = _formats.format_oasst_llama
format_baichuan2 = _formats.FORMATTERS["baichuan-2"]
format_baichuan = _formats.FORMATTERS["baichuan"]
format_openbuddy = _formats.format_openbuddy
format_redpajama_incite = _formats.format_redpajama_incite
format_snoozy = _formats.format_snoozy
format_phind = _formats.format_phind
format_intel = _formats.format_intel
format_open_orca = _formats.format_open_orca
format_mistrallite = _formats.format_mistrallite
format_zephyr = _formats.format_zephyr
format_pygmalion = _formats.format_pygmalion
format_chatml = _formats.format_chatml
format_mistral_instruct = _formats.format_mistral_instruct
format_chatglm3 = _formats.format_chatglm3
format_openchat = _formats.format_openchat
format_saiga = _formats.format_saiga
format_gemma = _formats.format_gemma

from ubatch.llama_cpp._chat_tools import (chatml_function_calling, functionary_chat_handler,  # noqa: E402,F401
                                          functionary_v1_v2_chat_handler)

register_chat_completion_handler("functionary")(functionary_chat_handler)
register_chat_completion_handler("functionary-v1")(functionary_v1_v2_chat_handler)
register_chat_completion_handler("functionary-v2")(functionary_v1_v2_chat_handler)
register_chat_completion_handler("chatml-function-calling")(chatml_function_calling)

# ---- multimodal handlers: not in ubatch (no vision encoder) ------------------------------------------------------
class _Multimodal:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}: multimodal (image) chat handlers are not implemented in "
                                  f"ubatch.llama_cpp (no vision encoder)")

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any):
        cls()


class Llava15ChatHandler(_Multimodal):
    pass


class MTMDChatHandler(_Multimodal):
    pass


class Gemma4ChatHandler(MTMDChatHandler):
    pass


class ObsidianChatHandler(Llava15ChatHandler):
    pass


class MoondreamChatHandler(Llava15ChatHandler):
    pass


class Llava16ChatHandler(Llava15ChatHandler):
    pass


class NanoLlavaChatHandler(Llava15ChatHandler):
    pass


class Llama3VisionAlphaChatHandler(Llava15ChatHandler):
    pass


class MiniCPMv26ChatHandler(Llava15ChatHandler):
    pass


class Qwen25VLChatHandler(Llava15ChatHandler):
    pass


Llama3VisionAlpha = Llama3VisionAlphaChatHandler

__all__ = ["ChatFormatter", "ChatFormatterResponse", "Jinja2ChatFormatter", "LlamaChatCompletionHandler",
           "LlamaChatCompletionHandlerNotFoundException", "LlamaChatCompletionHandlerRegistry",
           "chat_formatter_to_chat_completion_handler", "chatml_function_calling", "functionary_chat_handler",
           "functionary_v1_v2_chat_handler", "get_chat_completion_handler", "guess_chat_format_from_gguf_metadata",
           "hf_autotokenizer_to_chat_completion_handler", "hf_autotokenizer_to_chat_formatter",
           "hf_tokenizer_config_to_chat_completion_handler", "hf_tokenizer_config_to_chat_formatter",
           "register_chat_completion_handler", "register_chat_format", "format_gemma3"]
