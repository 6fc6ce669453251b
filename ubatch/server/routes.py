"""The endpoints: /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models, /health, /metrics."""
from __future__ import annotations

from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ubatch.server import responses as R
from ubatch.server import sse
from ubatch.server import tools
from ubatch.server.errors import APIError
from ubatch.server.generation import Generation
from ubatch.server.prompts import chat_tokens, token_lists
from ubatch.server.sampling import sampling_params
from ubatch.server.schemas import ChatRequest, CompletionRequest, EmbeddingRequest
from ubatch.server.state import ServerState
from ubatch.server.validation import parse, read_body

CLIENT_CLOSED = 499   # nginx's status for "the client closed the connection before the answer"


def _state(request: Request) -> ServerState:
    return request.app.state.ub


async def _body(request: Request, model):
    st = _state(request)
    req = parse(await read_body(request, st.cfg.max_body_bytes, st.cfg.body_timeout), model)
    st.check_model(req.model)
    return st, req


def _include_usage(req) -> bool:
    return bool(req.stream_options and req.stream_options.include_usage)


# ---- /v1/completions -----------------------------------------------------------------------------------
async def completions(request: Request) -> Response:
    st, req = await _body(request, CompletionRequest)
    prompts = token_lists(req.prompt, "prompt", st.tokenizer, st.n_vocab, st.cfg.max_prompts)
    params = sampling_params(req, st.cfg, st.SamplingParams, max_tokens=req.max_tokens, default_max_tokens=16,
                             logprobs=req.logprobs)
    gen = Generation(st.worker, prompts, params, req.n)
    await gen.start()
    rid = R.new_id("cmpl")
    ids = req.return_token_ids
    if req.stream:
        return sse.EngineStream(_stream_completion(st, req, gen, rid), gen)
    gen.watch_disconnect(request)
    try:
        await gen.collect()
    except ConnectionError:
        return Response(status_code=CLIENT_CLOSED)
    choices = []
    for k in sorted(gen.choices):
        c = gen.choices[k]
        lp = R.completion_logprobs(c.logprobs, st.piece) if req.logprobs is not None else None
        choices.append(R.completion_choice(k, "".join(c.text), c.finish_reason, lp, c.token_ids if ids else None))
    return JSONResponse(R.completion(rid, st.model_id, choices, gen.usage()))


async def _stream_choices(st: ServerState, req, gen: Generation, chunk, choice, head=()) -> AsyncIterator[bytes]:
    """The SSE body of a streamed completion or chat: `head` events first, then one chunk per engine step
    with choice(c, text, ids, lps) for every choice that moved (or finished); an APIError mid-stream becomes
    an error event; the usage chunk when asked for; [DONE]. chunk(choices, usage=None) builds a chunk."""
    for ev in head:
        yield sse.event(ev)
    try:
        async for step in gen.deltas():
            out = [choice(c, text, ids, lps) for c, text, ids, lps in step
                   if text or ids or c.finish_reason is not None]
            if out:
                yield sse.event(chunk(out))
    except APIError as e:
        yield sse.event(e.body())
    except ConnectionError:
        return
    if _include_usage(req):
        yield sse.event(chunk([], gen.usage()))
    yield sse.DONE


def _stream_completion(st: ServerState, req: CompletionRequest, gen: Generation, rid: str) -> AsyncIterator[bytes]:
    created = R.now()
    offsets = {}

    def choice(c, text, ids, lps):
        lp = None
        if req.logprobs is not None:
            lp = R.completion_logprobs(lps, st.piece, offsets.get(c.index, 0))
            offsets[c.index] = offsets.get(c.index, 0) + sum(len(t) for t in lp["tokens"])
        return R.completion_choice(c.index, text, c.finish_reason, lp, list(ids) if req.return_token_ids else None)

    return _stream_choices(st, req, gen, lambda out, usage=None: R.completion_chunk(rid, st.model_id, created, out,
                                                                                      usage), choice)


# ---- /v1/chat/completions ------------------------------------------------------------------------------
async def chat_completions(request: Request) -> Response:
    st, req = await _body(request, ChatRequest)
    plan = tools.check(req.tools, req.tool_choice, req.parallel_tool_calls)
    prompt = chat_tokens(st.tokenizer, req.messages, st.chat_format, plan, parse_special=st.cfg.chat_parse_special)
    n_top = None
    if req.logprobs:
        n_top = req.top_logprobs or 0
    elif req.top_logprobs is not None:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    params = sampling_params(req, st.cfg, st.SamplingParams, max_tokens=max_tokens,
                             default_max_tokens=st.cfg.max_tokens_limit, logprobs=n_top)
    if plan.active:
        params = tools.constrain(params, plan)
    gen = Generation(st.worker, [prompt], params, req.n, field="messages")
    await gen.start()
    rid = R.new_id("chatcmpl")
    if req.stream:
        return sse.EngineStream(_stream_chat(st, req, gen, rid, n_top, plan), gen)
    gen.watch_disconnect(request)
    try:
        await gen.collect()
    except ConnectionError:
        return Response(status_code=CLIENT_CLOSED)
    choices = []
    for k in sorted(gen.choices):
        c = gen.choices[k]
        lp = R.chat_logprobs(c.logprobs, st.piece, n_top) if n_top is not None else None
        ch = R.chat_choice(k, "".join(c.text), c.finish_reason, lp, c.token_ids if req.return_token_ids else None)
        if plan.active:
            ch["message"], ch["finish_reason"] = plan.message("".join(c.text), c.finish_reason)
        choices.append(ch)
    return JSONResponse(R.chat_completion(rid, st.model_id, choices, gen.usage()))


def _stream_chat(st: ServerState, req: ChatRequest, gen: Generation, rid: str, n_top,
                 plan: "tools.ToolPlan") -> AsyncIterator[bytes]:
    created = R.now()
    streams = {}

    def chunk(out, usage=None):
        return R.chat_chunk(rid, st.model_id, created, out, usage)

    def delta(c, text):
        """The text delta as OpenAI's delta; with tools, content and tool_calls deltas (ToolStream)."""
        if not plan.active:
            return ({"content": text} if text else {}), c.finish_reason
        ts = streams.setdefault(c.index, plan.stream())
        parts = ts.feed(text) if text else []
        finish = c.finish_reason
        if finish is not None:
            rest, called = ts.finish()
            parts += rest
            if called and finish != "length":
                finish = "tool_calls"
        return tools.merge_deltas(parts), finish

    def choice(c, text, ids, lps):
        dl, finish = delta(c, text)
        d = {"index": c.index, "delta": dl,
             "logprobs": R.chat_logprobs(lps, st.piece, n_top) if n_top is not None and lps else None,
             "finish_reason": finish}
        if req.return_token_ids:
            d["token_ids"] = list(ids)
        return d

    head = [chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None} for i in range(req.n)])]
    return _stream_choices(st, req, gen, chunk, choice, head)


# ---- /v1/embeddings ------------------------------------------------------------------------------------
async def embeddings(request: Request) -> Response:
    st, req = await _body(request, EmbeddingRequest)
    inputs = token_lists(req.input, "input", st.tokenizer, st.n_vocab, st.cfg.max_embedding_inputs)
    if req.dimensions is not None and req.dimensions != st.n_embd:
        raise APIError(400, f"dimensions = {req.dimensions}: this model's embeddings have {st.n_embd}",
                       param="dimensions")
    for i, ids in enumerate(inputs):
        if len(ids) > st.n_ctx_seq:
            where = "input" if len(inputs) == 1 else f"input.{i}"
            raise APIError(400, f"{where}: {len(ids)} tokens exceed the context of {st.n_ctx_seq} tokens",
                           param=where, code="context_length_exceeded")
    h = st.worker.submit_embeddings(inputs)
    try:
        _, (kind, payload) = await h.events.get()
    finally:
        h.done = True
    if kind == "error":
        raise payload
    return JSONResponse(R.embeddings(st.model_id, payload, sum(len(x) for x in inputs), req.encoding_format))


# ---- /v1/models, /health, /metrics ---------------------------------------------------------------------
async def models(request: Request) -> Response:
    st = _state(request)
    m = st.model
    meta = {"arch": getattr(m, "arch", None), "n_vocab": st.n_vocab, "n_embd": st.n_embd,
            "n_ctx_train": getattr(m, "n_ctx_train", None), "n_ctx": st.cfg.n_ctx, "parallel": st.cfg.parallel}
    return JSONResponse(R.models_list(st.model_id, st.created, meta))


async def health(request: Request) -> Response:
    st = _state(request)
    p = st.worker.published
    alive = st.worker.alive()
    status = "error" if not alive else "draining" if st.worker.draining else "ok"
    body = {"status": status, "model": st.model_id,
            "running": p.get("running", 0), "waiting": p.get("waiting", 0) + p.get("inbox", 0),
            "kv_cells_used": p.get("kv_cells_used", 0), "inflight": p.get("inflight", 0)}
    if not alive:
        body["error"] = "the engine thread has stopped"
    return JSONResponse(body, status_code=200 if status == "ok" else 503)


async def metrics(request: Request) -> Response:
    st = _state(request)
    p = st.worker.published
    gauges = {
        "ubatch_queue_depth": ("requests accepted but not yet decoding", p.get("waiting", 0) + p.get("inbox", 0)),
        "ubatch_active_sequences": ("sequences in the engine (prompt or generating)", p.get("running", 0)),
        "ubatch_kv_cells_used": ("KV-cache cells holding a token", p.get("kv_cells_used", 0)),
        "ubatch_requests_in_flight": ("requests submitted and not finished", p.get("inflight", 0)),
        "ubatch_engine_requests": ("requests the engine thread tracks", p.get("live", 0)),
        "ubatch_prefix_cache_hit_rate": ("prompt tokens taken from the prefix cache / prompt tokens looked up",
                                         p.get("prefix_cache_hit_rate", 0.0)),
        "ubatch_prefix_cache_cells": ("KV cells held only by the prefix cache", p.get("prefix_cache_cells", 0)),
        "ubatch_prefix_cache_entries": ("cached sequences in the prefix cache", p.get("prefix_cache_entries", 0)),
        "ubatch_prefix_cache_tokens_saved": ("prompt tokens not computed thanks to the prefix cache",
                                             p.get("prefix_cache_tokens_saved", 0)),
        "ubatch_prefix_cache_hits": ("requests that reused a cached prefix", p.get("prefix_cache_hits", 0)),
        "ubatch_prefix_cache_queries": ("requests looked up in the prefix cache", p.get("prefix_cache_queries", 0)),
    }
    return PlainTextResponse(st.metrics.render(gauges), media_type="text/plain; version=0.0.4; charset=utf-8")


ROUTES = [("/v1/completions", completions, ["POST"]), ("/v1/chat/completions", chat_completions, ["POST"]),
          ("/v1/embeddings", embeddings, ["POST"]), ("/v1/models", models, ["GET"]),
          ("/health", health, ["GET"]), ("/metrics", metrics, ["GET"])]
