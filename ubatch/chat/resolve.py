"""The one way a model's chat format is chosen — by the drop-in `Llama`, `ubatch.LLM.chat` and `ubatch serve`:

1. what the caller names: a `chat_format` (a registry name such as "chatml", or "chat_template.default" /
   "chat_template.<name>" for the GGUF's templates) or a Jinja `template` text (`--chat-template FILE`);
2. the GGUF's `tokenizer.chat_template`: the registry format it is guessed to be (llama-cpp-python's
   guess_chat_format_from_gguf_metadata: the template is exactly chatml's, mistral-instruct's / mixtral's or
   llama-3's), else the template itself ("chat_template.default", rendered by JinjaChatFormat);
3. no template: the architecture's format where ubatch knows one (Gemma GGUFs: "gemma3", Gemma's turn format),
   else llama-cpp-python's fallback "llama-2".

Step 3's Gemma entry is ubatch's: llama-cpp-python 0.3.36 falls back to "llama-2" for every template-less GGUF
(a prompt Gemma was never trained on); `chat_format="llama-2"` restores that (docs/compat.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from ubatch.chat.formats import FORMATTERS
from ubatch.chat.jinja_formatter import JinjaChatFormat
from ubatch.chat.response import ChatFormatterResponse

# Well-known templates (from the models' Hugging Face tokenizer_config.json), compared verbatim with a GGUF's
CHATML_CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
                        "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
                        "}}{% endif %}")
CHATML_BOS_TOKEN = "<s>"
CHATML_EOS_TOKEN = "<|im_end|>"
_MISTRAL_HEAD = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 "
                 "== 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
                 "}}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                 "{% elif message['role'] == 'assistant' %}")
_MISTRAL_TAIL = ("{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
                 "{% endfor %}")
MISTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token + ' ' }}" + _MISTRAL_TAIL
MISTRAL_INSTRUCT_BOS_TOKEN = "<s>"
MISTRAL_INSTRUCT_EOS_TOKEN = "</s>"
MIXTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token}}" + _MISTRAL_TAIL
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# Gemma's turn format for GGUFs without a template (gemma3-270m's has none): BOS, `<start_of_turn>{user|model}\n
# {content}<end_of_turn>\n` per turn, system / developer messages folded into the next user turn (Gemma has no
# system role), `<start_of_turn>model\n` to answer in. What Gemma 3's own Hugging Face template renders.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] in ['system', 'developer'] -%}"
    "{%- set ns.system = ns.system + m['content'] + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if m['role'] == 'assistant' else 'user' -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (ns.system if role == 'user' else '') + (m['content'] | trim)"
    " + '<end_of_turn>\\n' }}"
    "{%- if role == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")

_GEMMA3 = JinjaChatFormat(GEMMA3_TEMPLATE, eos_token="<end_of_turn>", bos_token="<bos>")


def format_gemma3(messages, **kwargs: Any) -> ChatFormatterResponse:
    """ubatch's "gemma3" format (not in llama-cpp-python): GEMMA3_TEMPLATE with Gemma's <bos>."""
    return _GEMMA3(messages=messages, **kwargs)


FORMATTERS["gemma3"] = format_gemma3
ARCH_FORMATS = {"gemma3": "gemma3", "gemma2": "gemma3", "gemma": "gemma3"}   # step 3, template-less GGUFs


def guess_chat_format_from_gguf_metadata(metadata: Mapping[str, Any]) -> Optional[str]:
    """The registry name of a GGUF's tokenizer.chat_template when it is one of the well-known ones, else None."""
    t = metadata.get("tokenizer.chat_template")
    if t is None:
        return None
    if t == CHATML_CHAT_TEMPLATE:
        return "chatml"
    if t in (MISTRAL_INSTRUCT_CHAT_TEMPLATE, MIXTRAL_INSTRUCT_CHAT_TEMPLATE):
        return "mistral-instruct"
    if t == LLAMA3_INSTRUCT_CHAT_TEMPLATE:
        return "llama-3"
    return None


def template_choices(metadata: Mapping[str, Any]) -> Dict[str, str]:
    """The GGUF's templates by chat-format name: "chat_template.<name>" for tokenizer.chat_template.<name>,
    "chat_template.default" for tokenizer.chat_template."""
    out = {k[len("tokenizer."):]: v for k, v in metadata.items()
           if k.startswith("tokenizer.chat_template.") and isinstance(v, str)}
    if isinstance(metadata.get("tokenizer.chat_template"), str):
        out["chat_template.default"] = metadata["tokenizer.chat_template"]
    return out


def default_chat_format(metadata: Mapping[str, Any], arch: Optional[str] = None) -> str:
    """Steps 2 and 3: the chat format a model gets when the caller names none."""
    if isinstance(metadata.get("tokenizer.chat_template"), str):
        return guess_chat_format_from_gguf_metadata(metadata) or "chat_template.default"
    return ARCH_FORMATS.get(arch or "", "llama-2")


def known_formats(metadata: Mapping[str, Any]) -> List[str]:
    return sorted(FORMATTERS) + sorted(template_choices(metadata))


@dataclass
class ChatFormat:
    """A resolved chat format: its name and the formatter (messages=..., tools=..., ...) -> ChatFormatterResponse."""

    name: str
    formatter: Callable[..., ChatFormatterResponse]

    def __call__(self, messages: List[dict], **kwargs: Any) -> ChatFormatterResponse:
        return self.formatter(messages=messages, **kwargs)


def resolve(metadata: Mapping[str, Any], *, arch: Optional[str] = None, bos_token: str = "", eos_token: str = "",
            eos_id: Optional[int] = None, chat_format: Optional[str] = None,
            template: Optional[str] = None) -> ChatFormat:
    """Steps 1-3. `bos_token` / `eos_token`: the texts of the vocabulary's BOS / EOS tokens (for Jinja
    templates); `eos_id`: the Jinja formatter's stop token. ValueError names an unknown chat_format."""
    if template is not None:
        return ChatFormat("chat_template.custom", JinjaChatFormat(template, eos_token=eos_token,
                                                                      bos_token=bos_token))
    name = chat_format if chat_format is not None else default_chat_format(metadata, arch)
    templates = template_choices(metadata)
    if name in templates:
        stops = [eos_id] if eos_id is not None else None
        return ChatFormat(name, JinjaChatFormat(templates[name], eos_token=eos_token, bos_token=bos_token,
                                                    stop_token_ids=stops))
    if name in FORMATTERS:
        return ChatFormat(name, FORMATTERS[name])
    raise ValueError(f"unknown chat format {name!r} (valid formats: {', '.join(known_formats(metadata))})")


def tokenizer_metadata(tokenizer) -> Dict[str, str]:
    """The chat-template entries of a ubatch Tokenizer's GGUF (or of any object with chat_template(s))."""
    md: Dict[str, str] = {}
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, str):
        md["tokenizer.chat_template"] = t
    for k, v in (getattr(tokenizer, "chat_templates", None) or {}).items():
        md[f"tokenizer.chat_template.{k}"] = v
    return md


def special_text(tokenizer, token: int) -> str:
    if token is None or token < 0 or not hasattr(tokenizer, "token_text"):
        return ""
    return tokenizer.token_text(token).decode("utf-8", "replace")


def resolve_for(tokenizer, arch: Optional[str] = None, *, chat_format: Optional[str] = None,
                template: Optional[str] = None) -> ChatFormat:
    """resolve() for a ubatch Tokenizer (LLM.chat, the server)."""
    bos, eos = getattr(tokenizer, "bos", -1), getattr(tokenizer, "eos", -1)
    return resolve(tokenizer_metadata(tokenizer), arch=arch, bos_token=special_text(tokenizer, bos),
                   eos_token=special_text(tokenizer, eos), eos_id=eos if eos is not None and eos >= 0 else None,
                   chat_format=chat_format, template=template)


def prompt_ids(tokenizer, rendered: ChatFormatterResponse) -> List[int]:
    """The token ids of a rendered chat prompt, as llama-cpp-python tokenizes it: special tokens written in
    the text parsed as such, BOS added unless the prompt holds it (added_special). The one place LLM.chat and
    the server turn a rendered conversation into ids."""
    return list(tokenizer.encode(rendered.prompt, add_special=not rendered.added_special, parse_special=True))
