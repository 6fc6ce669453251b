"""OpenAI response bodies: completions, chat completions, their stream chunks, logprobs, embeddings."""
from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


# ---- logprobs ------------------------------------------------------------------------------------------
def _entry(e: Any) -> Tuple[int, float, List[Tuple[int, float]]]:
    """One engine logprobs entry -> (token id, logprob, [(top id, top logprob), ...])."""
    if isinstance(e, dict):
        tid = e.get("token_id", e.get("token"))
        lp = e.get("logprob")
        top = e.get("top_logprobs", e.get("top", []))
    else:
        tid, lp, top = e[0], e[1], (e[2] if len(e) > 2 else [])
    if isinstance(top, dict):
        top = list(top.items())
    return int(tid), float(lp), [(int(t), float(v)) for t, v in top]


def completion_logprobs(entries: List[Any], piece: Callable[[int], str], offset0: int = 0) -> dict:
    """Legacy completions logprobs: tokens, token_logprobs, top_logprobs (dict text -> logprob), text_offset."""
    tokens, lps, tops, offs = [], [], [], []
    off = offset0
    for e in entries:
        tid, lp, top = _entry(e)
        t = piece(tid)
        tokens.append(t)
        lps.append(lp)
        d: Dict[str, float] = {}
        for i, v in top:                   # pieces can coincide (e.g. invalid UTF-8 bytes): keep the likeliest
            d.setdefault(piece(i), v)
        tops.append(d)
        offs.append(off)
        off += len(t)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}


def chat_logprobs(entries: List[Any], piece: Callable[[int], str], n_top: int) -> dict:
    def one(tid: int, lp: float) -> dict:
        t = piece(tid)
        return {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
    content = []
    for e in entries:
        tid, lp, top = _entry(e)
        d = one(tid, lp)
        d["top_logprobs"] = [one(i, v) for i, v in top[:n_top]]
        content.append(d)
    return {"content": content}


# ---- bodies --------------------------------------------------------------------------------------------
def completion(rid: str, model: str, choices: List[dict], usage: dict) -> dict:
    return {"id": rid, "object": "text_completion", "created": now(), "model": model,
            "choices": choices, "usage": usage}


def completion_choice(index: int, text: str, finish_reason: Optional[str], logprobs: Optional[dict],
                      token_ids: Optional[List[int]] = None) -> dict:
    d = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    if token_ids is not None:
        d["token_ids"] = token_ids
    return d


def chat_completion(rid: str, model: str, choices: List[dict], usage: dict) -> dict:
    return {"id": rid, "object": "chat.completion", "created": now(), "model": model,
            "choices": choices, "usage": usage}


def chat_choice(index: int, text: str, finish_reason: Optional[str], logprobs: Optional[dict],
                token_ids: Optional[List[int]] = None) -> dict:
    d = {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
         "finish_reason": finish_reason}
    if token_ids is not None:
        d["token_ids"] = token_ids
    return d


def completion_chunk(rid: str, model: str, created: int, choices: List[dict], usage: Optional[dict] = None) -> dict:
    d = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices}
    if usage is not None:
        d["usage"] = usage
    return d


def chat_chunk(rid: str, model: str, created: int, choices: List[dict], usage: Optional[dict] = None) -> dict:
    d = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
    if usage is not None:
        d["usage"] = usage
    return d


def embeddings(model: str, vectors: np.ndarray, n_tokens: int, encoding: str) -> dict:
    data = []
    for i, v in enumerate(vectors):
        emb: Any = (base64.b64encode(np.ascontiguousarray(v, np.float32).tobytes()).decode("ascii")
                    if encoding == "base64" else v.astype(float).tolist())
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}


def models_list(model_id: str, created: int, meta: Dict[str, Any]) -> dict:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                         "owned_by": "ubatch", "meta": meta}]}
