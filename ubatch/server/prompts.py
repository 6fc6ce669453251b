"""OpenAI's union-shaped fields -> what the engine takes: prompts as token-id lists, chat messages through the
model's chat template, stop strings as a list. Each wrong shape is an APIError naming the field."""
from __future__ import annotations

from typing import Any, List, Optional

from ubatch.server.errors import APIError


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _ids(name: str, ids: list, n_vocab: int) -> List[int]:
    for i, t in enumerate(ids):
        if not _is_int(t):
            raise APIError(422, f"{name}.{i}: a token id must be an integer, got {type(t).__name__}",
                           param=f"{name}.{i}")
        if t < 0 or t >= n_vocab:
            raise APIError(400, f"{name}.{i}: token id {t} is out of the vocabulary [0, {n_vocab})",
                           param=f"{name}.{i}")
    return list(ids)


def _need_tokenizer(tokenizer, name: str):
    if tokenizer is None:
        raise APIError(400, f"{name}: this model has no tokenizer; send token ids (a list of integers)",
                       param=name)
    return tokenizer


def encode_text(tokenizer, text: str) -> List[int]:
    """A text prompt as llama.cpp's server tokenizes it: with BOS where the vocabulary adds one, special
    tokens written in the text parsed as special tokens."""
    ids = list(tokenizer.encode(text, add_special=True, parse_special=True))
    bos = getattr(tokenizer, "bos", -1)
    if len(ids) >= 2 and bos >= 0 and ids[0] == bos and ids[1] == bos:   # the text itself began with BOS
        ids = ids[1:]
    return ids


def token_lists(value: Any, name: str, tokenizer, n_vocab: int, max_items: int) -> List[List[int]]:
    """`prompt` / `input`: str | list[str] | list[int] | list[list[int]] -> one token-id list per item."""
    if value is None:
        raise APIError(422, f"{name}: Field required", param=name)
    if isinstance(value, str):
        items: list = [value]
    elif isinstance(value, list):
        if not value:
            raise APIError(400, f"{name}: must not be empty", param=name)
        if all(_is_int(x) for x in value):
            items = [value]
        else:
            items = value
    else:
        raise APIError(422, f"{name}: expected a string, a list of strings, a list of token ids or a list of "
                            f"token-id lists, got {type(value).__name__}", param=name)
    if len(items) > max_items:
        raise APIError(400, f"{name}: {len(items)} items exceed the limit of {max_items}", param=name)
    out = []
    for i, item in enumerate(items):
        where = f"{name}.{i}" if items is value else name
        if isinstance(item, str):
            ids = encode_text(_need_tokenizer(tokenizer, where), item)
        elif isinstance(item, list):
            ids = _ids(where, item, n_vocab)
        else:
            raise APIError(422, f"{where}: expected a string or a list of token ids, got {type(item).__name__}",
                           param=where)
        if not ids:
            raise APIError(400, f"{where}: the prompt is empty", param=where)
        out.append(ids)
    return out


def stop_list(value: Any) -> Optional[List[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise APIError(422, "stop: expected a string or a list of strings", param="stop")
    if len(value) > 4:
        raise APIError(400, f"stop: {len(value)} sequences exceed the limit of 4", param="stop")
    if any(s == "" for s in value):
        raise APIError(400, "stop: a stop sequence must not be empty", param="stop")
    return list(value) or None


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise APIError(422, f"{where}.{j}: only {{\"type\": \"text\", \"text\": str}} parts are supported",
                               param=f"{where}.{j}")
            parts.append(part["text"])
        return "".join(parts)
    raise APIError(422, f"{where}: expected a string or a list of text parts, got {type(content).__name__}",
                   param=where)


def chat_messages(messages) -> List[dict]:
    """The request's messages as the chat formats take them: role, content as text, and the tool fields
    (name, tool_calls, tool_call_id) when given."""
    out = []
    for i, m in enumerate(messages):
        d = {"role": m.role, "content": _content_text(m.content, f"messages.{i}.content")}
        for k in ("name", "tool_calls", "tool_call_id"):
            v = getattr(m, k, None)
            if v is not None:
                d[k] = v
        out.append(d)
    return out


def chat_tokens(tokenizer, messages, chat_format, plan=None, *, parse_special: bool = False) -> List[int]:
    """Messages -> the server's chat format (ubatch.chat.resolve, chosen at start-up) -> token ids; with a
    ToolPlan (ubatch.server.tools) the tools are shown to the model and a forced call is opened for it. A
    format or template refusing the conversation (e.g. role order) is a 400 naming it (with the template's own
    message; other exception text stays in the server log). Message contents are tokenized as text: only the
    format's markup gives special tokens (parse_special=True, `--chat-parse-special`: parsed in the contents
    too, as llama.cpp's server does)."""
    tok = _need_tokenizer(tokenizer, "messages")
    from ubatch.tokenizer.chat_encode import chat_prompt_ids
    msgs = chat_messages(messages)
    if plan is not None:
        chat_format = plan.chat_format(chat_format)
    try:
        return chat_prompt_ids(tok, chat_format, msgs, parse_special=parse_special)
    except Exception as e:   # a template may raise on a conversation it does not accept (e.g. role order)
        import jinja2
        why = f": {e}" if isinstance(e, (ValueError, jinja2.TemplateError)) else ""
        raise APIError(400, f"messages: the chat format {getattr(chat_format, 'name', '?')!r} refused the "
                            f"conversation{why}", param="messages")
