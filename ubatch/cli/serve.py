"""`ubatch serve --model NAME_OR_PATH`: the OpenAI-compatible HTTP server (needs the [server] extra)."""
from __future__ import annotations

import os
import sys

from ubatch.cli.kv_options import add_kv_type_options
from ubatch.server.config import ServerConfig


def add_parser(sub) -> None:
    d = ServerConfig()
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching",
                       description="POST /v1/completions, /v1/chat/completions, /v1/embeddings; GET /v1/models, "
                                   "/health, /metrics. Binds 127.0.0.1 unless --host says otherwise.")
    p.add_argument("--model", required=True, help="tiny-llama, gemma3-270m, qwen2.5-0.5b or a GGUF path")
    p.add_argument("--model-id", default=None, help="the model id clients send (default: --model)")
    p.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    p.add_argument("--port", type=int, default=d.port, help=f"port (default {d.port}; 0 picks a free one)")
    p.add_argument("--parallel", type=int, default=d.parallel, help="sequences decoded together")
    p.add_argument("--n-ctx", type=int, default=d.n_ctx, help="total context, shared by the parallel sequences")
    p.add_argument("--n-batch", type=int, default=d.n_batch)
    p.add_argument("--n-ubatch", type=int, default=d.n_ubatch)
    p.add_argument("--threads", type=int, default=None, help="compute threads (default: all cores)")
    add_kv_type_options(p, d.type_k, d.type_v)
    p.add_argument("--no-prefix-cache", action="store_true",
                   help="turn automatic prefix caching off (every prompt computed from scratch)")
    p.add_argument("--prefix-cache-cells", type=int, default=None, metavar="N",
                   help="at most N KV cells held by the prefix cache (default: the KV cache, evicted on demand)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $UBATCH_API_KEY when set)")
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help="requests that may wait beyond the running ones before 429")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument("--max-tokens-limit", type=int, default=d.max_tokens_limit)
    p.add_argument("--grace", type=float, default=d.grace_seconds,
                   help="seconds in-flight requests may finish after SIGTERM")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="Jinja chat template to use instead of the model's (gemma GGUFs without one get Gemma's)")
    p.add_argument("--chat-format", default=None, metavar="NAME",
                   help="a named chat format instead of the model's: chatml, llama-2, llama-3, gemma, ... "
                        "(llama-cpp-python's names; see the README's chat formats table)")
    p.add_argument("--draft", default=None, metavar="prompt-lookup|MODEL",
                   help="exact speculative decoding: 'prompt-lookup', or a draft model (name or GGUF path) sharing "
                        "the vocabulary; the output is the same token for token")
    p.add_argument("--draft-max", type=int, default=d.draft_max, help=f"longest draft (default {d.draft_max})")
    p.add_argument("--chat-parse-special", action="store_true",
                   help="parse special-token text inside chat message contents (llama.cpp's server does; by "
                        "default contents are text and only the template's markup gives special tokens)")
    p.add_argument("--allowed-hosts", default=None, metavar="H1,H2",
                   help="Host header names accepted ('*': any; default: loopback names when bound to loopback, "
                        "else any)")
    p.add_argument("--cors-origins", default="", metavar="O1,O2",
                   help="browser Origins allowed cross-site, e.g. http://localhost:3000 ('*': any; default none)")
    p.add_argument("--header-timeout", type=float, default=d.header_timeout,
                   help=f"seconds a connection may take to send a request head (default {d.header_timeout:g})")
    p.add_argument("--body-timeout", type=float, default=d.body_timeout,
                   help=f"seconds a request may take to send its body, 408 beyond (default {d.body_timeout:g})")
    r = p.add_argument_group("Ray Serve (the [ray] extra; docs/scale-out.md)")
    r.add_argument("--ray", action="store_true", help="serve as a Ray Serve deployment of --replicas engines")
    r.add_argument("--replicas", type=int, default=1, help="replicas, each one engine (default 1)")
    r.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="join this Ray cluster ('auto', host:port, ray://...; default: start a local one)")
    r.add_argument("--replica-cpus", type=float, default=1.0,
                   help="CPUs per replica; its engine threads follow them unless --threads says (default 1)")
    r.add_argument("--min-replicas", type=int, default=None, help="autoscaling: fewest replicas")
    r.add_argument("--max-replicas", type=int, default=None, help="autoscaling: most replicas")
    r.add_argument("--target-ongoing-requests", type=float, default=None,
                   help="autoscaling: ongoing requests per replica Serve aims at (default --parallel)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def config_from(args) -> ServerConfig:
    for name in ("parallel", "n_ctx", "n_batch", "n_ubatch", "max_queue", "max_body_bytes", "max_tokens_limit",
                 "draft_max"):
        if getattr(args, name) < 1:
            raise SystemExit(f"ubatch serve: --{name.replace('_', '-')} must be at least 1")
    for name in ("header_timeout", "body_timeout"):
        v = getattr(args, name)
        if not (v > 0 and v < float("inf")):
            raise SystemExit(f"ubatch serve: --{name.replace('_', '-')} must be a positive number of seconds")
    split = lambda v: [x.strip() for x in (v or "").split(",") if x.strip()]   # noqa: E731
    return ServerConfig(model=args.model, model_id=args.model_id, host=args.host, port=args.port,
                        parallel=args.parallel, n_ctx=args.n_ctx, n_batch=args.n_batch, n_ubatch=args.n_ubatch,
                        type_k=args.type_k, type_v=args.type_v, n_threads=args.threads, api_key=args.api_key or os.environ.get("UBATCH_API_KEY") or None,
                        max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                        max_tokens_limit=args.max_tokens_limit, grace_seconds=args.grace,
                        chat_template_file=args.chat_template, chat_format=args.chat_format,
                        chat_parse_special=args.chat_parse_special,
                        allowed_hosts=split(args.allowed_hosts) or None, cors_origins=split(args.cors_origins),
                        header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                        prefix_cache=not args.no_prefix_cache, prefix_cache_cells=args.prefix_cache_cells,
                        draft=args.draft, draft_max=args.draft_max)


def run(args) -> int:
    try:
        from ubatch.server.http_server import run as run_http
        from ubatch.server.state import build_state
    except ImportError as e:
        print(f"ubatch serve needs the [server] extra (pip install 'ubatch[server]'): {e}", file=sys.stderr)
        return 2
    cfg = config_from(args)
    if args.ray:
        from ubatch.ray.launch import run as run_ray
        return run_ray(cfg, address=args.ray_address, replicas=args.replicas, replica_cpus=args.replica_cpus,
                       min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                       target_ongoing_requests=args.target_ongoing_requests, log_level=args.log_level)
    try:
        state = build_state(cfg)
    except (ValueError, OSError) as e:
        print(f"ubatch serve: {e}", file=sys.stderr)
        return 2
    return run_http(state, log_level=args.log_level)
