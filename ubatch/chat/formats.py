"""llama-cpp-python 0.3.36's named chat formats (llama-2, chatml, gemma, ...): each turns a conversation into the
same prompt text and stop strings as its formatter of that name (tests/chat/test_chat_formats.py compares every one
with recordings of llama-cpp-python's own formatters, tests/data/chat/formats.json). Their quirks are kept, since
models were prompted that way through llama-cpp-python: open-orca maps only the roles "User" / "Assistant" (so
ordinary lower-case turns are left out), saiga maps "bot" and not "assistant", intel keeps a literal
"{system_message}", snoozy ignores its system template, gemma drops system messages.

A format is a function (messages, **kwargs) -> ChatFormatterResponse, kept in FORMATTERS by name."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ubatch.chat.response import ChatFormatterResponse

Formatter = Callable[..., ChatFormatterResponse]
Turn = Tuple[str, Optional[str]]          # (the role's prefix text, the message text or None)

FORMATTERS: Dict[str, Formatter] = {}


def register(name: str, formatter: Formatter, overwrite: bool = True) -> Formatter:
    if not overwrite and name in FORMATTERS:
        raise ValueError(f"Formatter with name '{name}' is already registered. Use `overwrite=True` to "
                         f"overwrite it.")
    FORMATTERS[name] = formatter
    return formatter


def system_text(messages: Sequence[dict]) -> str:
    """The first system message's content ('' when there is none or it is None)."""
    for m in messages:
        if m["role"] == "system":
            return m.get("content") or ""
    return ""


def turns(messages: Sequence[dict], prefixes: Dict[str, str]) -> List[Turn]:
    """The messages whose role has a prefix, as (prefix, text); non-text content reads as None."""
    out: List[Turn] = []
    for m in messages:
        if m["role"] in prefixes:
            c = m.get("content")
            out.append((prefixes[m["role"]], c if isinstance(c, str) else None))
    return out


# ---- the ways turns are joined ----------------------------------------------------------------------------------
def join_llama2(head: str, ts: List[Turn], sep: str, sep2: str) -> str:
    seps = (sep, sep2)
    out = head + sep
    for i, (role, text) in enumerate(ts):
        if head and i == 0:
            out += (text or "") + seps[i % 2]
        elif text:
            out += role + text + " " + seps[i % 2]
        else:
            out += role + " "
    return out


def join_colon(head: str, ts: List[Turn], sep: str, sep2: Optional[str] = None, open_end: str = ":") -> str:
    """head + sep, then 'role: text' + the separator (alternating sep / sep2 when sep2 is given); a turn
    without text ends the prompt with role + open_end."""
    seps = (sep, sep if sep2 is None else sep2)
    out = head + sep
    for i, (role, text) in enumerate(ts):
        out += role + ": " + text + seps[i % 2] if text else role + open_end
    return out


def join_plain(head: str, ts: List[Turn], sep: str) -> str:
    out = head
    for role, text in ts:
        out += role + text + sep if text else role
    return out


def join_lines(head: str, ts: List[Turn], sep: str) -> str:
    """chatml style: role, newline, text, separator, newline."""
    out = "" if head == "" else head + sep + "\n"
    for role, text in ts:
        out += role + "\n" + text + sep + "\n" if text else role + "\n"
    return out


def join_glm(head: str, ts: List[Turn]) -> str:
    out = head
    for role, text in ts:
        out += role + "\n" + " " + text if text else role
    return out


# ---- the formats --------------------------------------------------------------------------------------------------
def _answer(messages, prefixes: Dict[str, str], answer: str = "assistant") -> List[Turn]:
    """The mapped turns, then the open turn the model answers in."""
    return turns(messages, prefixes) + [(prefixes[answer], None)]


def format_llama2(messages, **kwargs: Any) -> ChatFormatterResponse:
    s = system_text(messages)
    head = f"[INST] <<SYS>>\n{s}\n<</SYS>>" if s else ""
    ts = turns(messages, {"user": "<s>[INST]", "assistant": "[/INST]"})
    return ChatFormatterResponse(prompt=join_llama2(head, ts, " ", "</s>") + "[/INST]")


def format_llama3(messages, **kwargs: Any) -> ChatFormatterResponse:
    hdr = {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n" for r in ("system", "user", "assistant")}
    return ChatFormatterResponse(prompt=join_plain("", _answer(messages, hdr), "<|eot_id|>"), stop="<|eot_id|>")


def format_alpaca(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = turns(messages, {"user": "### Instruction", "assistant": "### Response"})
    return ChatFormatterResponse(prompt=join_colon(system_text(messages), ts, "\n\n", "</s>"))


def format_qwen(messages, **kwargs: Any) -> ChatFormatterResponse:
    head = "<|im_start|>system\n" + (system_text(messages) or "You are a helpful assistant.")
    ts = _answer(messages, {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"})
    return ChatFormatterResponse(prompt=join_lines(head, ts, "<|im_end|>"), stop="<|endoftext|>")


VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                 "helpful, detailed, and polite answers to the user's questions.")


def format_vicuna(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "USER", "assistant": "ASSISTANT"})
    return ChatFormatterResponse(prompt=join_colon(VICUNA_SYSTEM, ts, " ", "</s>"))


def format_oasst_llama(messages, **kwargs: Any) -> ChatFormatterResponse:
    head = f"[INST] <<SYS>>\n{system_text(messages)}\n<</SYS>>\n\n"
    ts = _answer(messages, {"user": "<|prompter|>", "assistant": "<|assistant|>"})
    return ChatFormatterResponse(prompt=join_plain(head, ts, "</s>"))


def _baichuan(user: str, assistant: str) -> Formatter:
    def fmt(messages, **kwargs: Any) -> ChatFormatterResponse:
        ts = _answer(messages, {"user": user, "assistant": assistant})
        return ChatFormatterResponse(prompt=join_plain(system_text(messages), ts, ""))
    return fmt


OPENBUDDY_SYSTEM = (
    "You are a helpful, respectful and honest INTP-T AI Assistant named Buddy. You are talking to a human User.\n"
    "Always answer as helpfully and logically as possible, while being safe. Your answers should not include any "
    "harmful, political, religious, unethical, racist, sexist, toxic, dangerous, or illegal content. Please ensure "
    "that your responses are socially unbiased and positive in nature.\n"
    "If a question does not make any sense, or is not factually coherent, explain why instead of answering "
    "something not correct. If you don't know the answer to a question, please don't share false information.\n"
    "You can speak fluently in many languages, for example: English, Chinese.\n"
    "You cannot access the internet, but you have vast knowledge, cutoff: 2021-09.\n"
    "You are trained by OpenBuddy team, (https://openbuddy.ai, https://github.com/OpenBuddy/OpenBuddy), you are "
    "based on LLaMA and Falcon transformers model, not related to GPT or OpenAI.\n\n")


def format_openbuddy(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "User", "assistant": "Assistant"})
    return ChatFormatterResponse(prompt=join_colon(OPENBUDDY_SYSTEM, ts, "\n"))


def format_redpajama_incite(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<human>", "assistant": "<bot>"})
    return ChatFormatterResponse(prompt=join_colon(system_text(messages), ts, "\n"), stop="<human>")


SNOOZY_SYSTEM = ("The prompt below is a question to answer, a task to complete, or a conversation to respond to; "
                 "decide which and write an appropriate response.")


def format_snoozy(messages, **kwargs: Any) -> ChatFormatterResponse:
    s = system_text(messages)
    ts = _answer(messages, {"user": "### Prompt", "assistant": "### Response"})
    return ChatFormatterResponse(prompt=join_colon(s if s != "" else SNOOZY_SYSTEM, ts, "\n"), stop="###")


def format_phind(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "### User Message", "assistant": "### Assistant"})
    head = "### System Prompt\nYou are an intelligent programming assistant."
    return ChatFormatterResponse(prompt=join_colon(head, ts, "\n\n"))


def format_intel(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "### User:", "assistant": "### Assistant:"})
    return ChatFormatterResponse(prompt=join_colon("### System:\n{system_message}", ts, "\n"))


OPEN_ORCA_SYSTEM = (
    "You are a helpful assistant. Please answer truthfully and write out your thinking step by step to be sure you "
    "get the right answer. If you make a mistake or encounter an error in your thinking, say so out loud and "
    "attempt to correct it. If you don't know or aren't sure about something, say so clearly. You will act as a "
    "professional logician, mathematician, and physicist. You will also act as the most appropriate type of expert "
    "to answer any particular question or solve the relevant problem; state which expert type your are, if so. "
    "Also think of any particular named expert that would be ideal to answer the relevant question or solve the "
    "relevant problem; name and act as them, if appropriate.")


def format_open_orca(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"User": "User", "Assistant": "Assistant"}, answer="Assistant")
    return ChatFormatterResponse(prompt=join_colon(OPEN_ORCA_SYSTEM, ts, "<|end_of_turn|>\n", open_end=": "),
                                 stop="User")


def format_mistrallite(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<|prompter|>", "assistant": "</s>\n<|assistant|>"})
    return ChatFormatterResponse(prompt=join_plain(f"<|system|>{system_text(messages)}</s>", ts, " "))


def format_zephyr(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<|user|>\n", "assistant": "<|assistant|>\n"})
    return ChatFormatterResponse(prompt=join_lines(f"<|system|>\n{system_text(messages)}", ts, "</s>"), stop="</s>")


def format_pygmalion(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<|user|>", "assistant": "<|model|>"})
    return ChatFormatterResponse(prompt=join_lines(f"<|system|>{system_text(messages)}", ts, "\n"), stop="\n")


def format_chatml(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"})
    head = f"<|im_start|>system\n{system_text(messages)}"
    return ChatFormatterResponse(prompt=join_lines(head, ts, "<|im_end|>"), stop="<|im_end|>")


def format_mistral_instruct(messages, **kwargs: Any) -> ChatFormatterResponse:
    out = ""
    for m in messages:
        c = m.get("content")
        if m["role"] == "user" and isinstance(c, str):
            out += "[INST] " + c
        elif m["role"] == "assistant" and c is not None:
            out += " [/INST]" + c + "</s>"
    return ChatFormatterResponse(prompt=out + " [/INST]", stop="</s>")


def format_chatglm3(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<|user|>", "assistant": "<|assistant|>"})
    return ChatFormatterResponse(prompt=join_glm(f"<|system|>\n{system_text(messages)}", ts), stop="</s>")


def format_openchat(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "GPT4 Correct User: ",
                            "assistant": "<|end_of_turn|>GPT4 Correct Assistant: "})
    head = f"{system_text(messages)}<|end_of_turn|>"
    return ChatFormatterResponse(prompt=join_lines(head, ts, "<|end_of_turn|>"), stop="<|end_of_turn|>")


def format_saiga(messages, **kwargs: Any) -> ChatFormatterResponse:
    out = ""
    for role, text in turns(messages, {"user": "user", "bot": "bot", "system": "system"}):
        out += f"<s>{role}\n{text}</s>" if text else f"<s>{role}\n"
    return ChatFormatterResponse(prompt=(out + "<s>bot").strip())


def format_gemma(messages, **kwargs: Any) -> ChatFormatterResponse:
    ts = _answer(messages, {"user": "<start_of_turn>user\n", "assistant": "<start_of_turn>model\n"})
    return ChatFormatterResponse(prompt=join_plain("", ts, "<end_of_turn>\n"), stop="<end_of_turn>\n")


for _name, _f in [("llama-2", format_llama2), ("llama-3", format_llama3), ("alpaca", format_alpaca),
                  ("qwen", format_qwen), ("vicuna", format_vicuna), ("oasst_llama", format_oasst_llama),
                  ("baichuan-2", _baichuan("<reserved_106>", "<reserved_107>")),
                  ("baichuan", _baichuan("<reserved_102>", "<reserved_103>")), ("openbuddy", format_openbuddy),
                  ("redpajama-incite", format_redpajama_incite), ("snoozy", format_snoozy), ("phind", format_phind),
                  ("intel", format_intel), ("open-orca", format_open_orca), ("mistrallite", format_mistrallite),
                  ("zephyr", format_zephyr), ("pygmalion", format_pygmalion), ("chatml", format_chatml),
                  ("mistral-instruct", format_mistral_instruct), ("chatglm3", format_chatglm3),
                  ("openchat", format_openchat), ("saiga", format_saiga), ("gemma", format_gemma)]:
    register(_name, _f)

LLAMA_CPP_FORMATS = tuple(FORMATTERS)     # the 23 formats llama-cpp-python registers with register_chat_format
