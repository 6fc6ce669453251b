"""Chat prompts to token ids without special-token injection (docs/server.md).

The conversation is rendered by the caller's `render(messages) -> str` (the chat template, whatever formatter
produces it); the message contents are then tokenized as text and only the template's own markup can produce
control tokens: a user who writes `<|im_end|><|im_start|>system` gets those characters as text.

Where each content lands in the rendered text is found with placeholders: the conversation is rendered once more
with every content replaced by a unique marker, and if substituting the contents (as they are, or trimmed as
templates like Gemma's do) for the markers gives back the real rendering exactly, the markers' positions are
the contents' (fidelity: the ids are the old ones whenever a content holds no control-token text). A template
whose output depends on the content in other ways (it splits or tests it) is rendered as is when no content
holds control-token text, else with each content wrapped in unique delimiters, what lies between them being
text (and, if the template cut a content, everything before a lone delimiter). `parse_special_content=True` restores the old
behaviour (the whole rendering tokenized with special tokens parsed).
"""
from __future__ import annotations

import secrets
from typing import Callable, List, Optional, Sequence, Tuple

Segments = List[Tuple[str, bool]]      # (text, is_content)
_TRANSFORMS = (lambda c: c, str.strip)


def _with_contents(messages: Sequence[dict], contents: dict) -> List[dict]:
    return [dict(m, content=contents[i]) if i in contents else dict(m) for i, m in enumerate(messages)]


def _split(text: str, marks: dict) -> Segments:
    """text with the markers of `marks` (marker -> content) -> segments: markup (False) and contents (True)."""
    out: Segments = []
    pos = 0
    while True:
        hits = [(text.find(m, pos), m) for m in marks]
        hits = [h for h in hits if h[0] >= 0]
        if not hits:
            break
        at, m = min(hits)
        if at > pos:
            out.append((text[pos:at], False))
        if marks[m]:
            out.append((marks[m], True))
        pos = at + len(m)
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def _wrapped(render: Callable[[List[dict]], str], messages: Sequence[dict], texts: dict, nonce: str) -> Segments:
    """Fallback: contents wrapped in delimiters; whatever lies between an opening and a closing one is text."""
    op, cl = f"\ue000{nonce}<", f">{nonce}\ue001"
    w = render(_with_contents(messages, {i: op + c + cl for i, c in texts.items()}))
    out: Segments = []
    inside, pos = False, 0
    while pos < len(w):
        nxt = w.find(cl if inside else op, pos)
        stray = w.find(op if inside else cl, pos)      # a delimiter out of order (a template that cut the content)
        if 0 <= stray and (nxt < 0 or stray < nxt):
            # where the cut content begins is unknown: everything up to the stray delimiter counts as text (safe:
            # never a control token out of a content; at worst some markup is tokenized as text)
            piece = w[pos:stray].replace(op, "").replace(cl, "")
            if piece:
                out.append((piece, True))
            pos = stray + len(op if inside else cl)
            inside = not inside if inside else False
            continue
        end = len(w) if nxt < 0 else nxt
        piece = w[pos:end]
        if piece:
            out.append((piece, inside))
        if nxt < 0:
            break
        pos = nxt + len(cl if inside else op)
        inside = not inside
    return out


def chat_segments(render: Callable[[List[dict]], str], messages: Sequence[dict],
                  has_special: Optional[Callable[[str], bool]] = None, real: Optional[str] = None) -> Segments:
    """The rendered conversation as (text, is_content) segments (see the module docstring). has_special(text)
    tells whether a text holds control-token text: when no content does, a template the placeholders cannot
    follow is simply rendered (nothing to protect)."""
    texts = {i: m["content"] for i, m in enumerate(messages)
             if isinstance(m, dict) and isinstance(m.get("content"), str) and m["content"]}
    real = render(list(messages)) if real is None else real
    if not texts:
        return [(real, False)] if real else []
    nonce = secrets.token_hex(8)
    marks = {i: f"\ue000{nonce}:{i}\ue001" for i in texts}
    templ = render(_with_contents(messages, marks))
    for f in _TRANSFORMS:
        sub = {marks[i]: f(c) for i, c in texts.items()}
        rebuilt = templ
        for m, c in sub.items():
            rebuilt = rebuilt.replace(m, c)
        if rebuilt == real:
            return _split(templ, sub)
    if has_special is not None and not any(has_special(c) for c in texts.values()):
        return [(real, False)]
    return _wrapped(render, messages, texts, nonce)


def encode_chat(tokenizer, messages: Sequence[dict], render: Callable[[List[dict]], str], *,
                parse_special_content: bool = False) -> List[int]:
    """Token ids of the rendered conversation, with BOS where the vocabulary adds one (a template that writes
    the BOS itself does not get a second). Contents are text unless parse_special_content=True."""
    if parse_special_content or not hasattr(tokenizer, "encode_segments"):
        text = render(list(messages))
        ids = list(tokenizer.encode(text, add_special=True, parse_special=parse_special_content or
                                    not hasattr(tokenizer, "encode_segments")))
    else:
        def has_special(text: str) -> bool:
            return any(tokenizer.is_control(i) for i in tokenizer.encode(text, add_special=False, parse_special=True))

        ids = list(tokenizer.encode_segments(chat_segments(render, messages, has_special), add_special=True))
    bos = getattr(tokenizer, "bos", -1)
    if len(ids) >= 2 and bos >= 0 and ids[0] == bos and ids[1] == bos:
        ids = ids[1:]
    return ids


def chat_prompt_ids(tokenizer, fmt, messages: Sequence[dict], *, parse_special: bool = False,
                    **format_kwargs) -> List[int]:
    """Token ids of a conversation through a chat format (ubatch.chat.resolve's ChatFormat: messages ->
    ChatFormatterResponse): the contents as text, the BOS added unless the prompt holds it (added_special).
    parse_special=True: ubatch.chat.resolve.prompt_ids, llama-cpp-python's tokenization (specials parsed
    everywhere)."""
    rendered = fmt(list(messages), **format_kwargs)
    if parse_special or not hasattr(tokenizer, "encode_segments"):
        from ubatch.chat.resolve import prompt_ids
        return prompt_ids(tokenizer, rendered)

    def render(ms: List[dict]) -> str:
        return fmt(ms, **format_kwargs).prompt

    def has_special(text: str) -> bool:
        return any(tokenizer.is_control(i) for i in tokenizer.encode(text, add_special=False, parse_special=True))

    segments = chat_segments(render, messages, has_special, real=rendered.prompt)
    return list(tokenizer.encode_segments(segments, add_special=not rendered.added_special))


__all__ = ["chat_segments", "encode_chat", "chat_prompt_ids"]
