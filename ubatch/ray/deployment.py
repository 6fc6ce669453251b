"""build_app(model=..., replicas=N, **engine_args): `ubatch serve`'s OpenAI app as a Ray Serve Application.

Each replica is one Ray actor holding one LLMEngine (its own continuous batching, KV cache and engine thread) behind
the very FastAPI app `ubatch serve` runs (ubatch.server.app.create_app: same routes, validation, errors, metrics).
The engine's compute threads follow the CPUs Ray gives the replica (`replica_cpus`, unless n_threads is given);
`max_ongoing_requests` is at least parallel + max_queue so that Ray does not cap the engine's batch (its default
is 5). Every response carries `x-ubatch-replica` (the replica's Serve id); /metrics is the answering replica's."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ubatch.server.config import ServerConfig

REPLICA_HEADER = b"x-ubatch-replica"
_FIELDS = {f.name for f in dataclasses.fields(ServerConfig)}


class ReplicaHeader:
    """Pure ASGI middleware: adds `x-ubatch-replica: <id>` to every HTTP response (errors and streams too)."""

    def __init__(self, app, replica: str) -> None:
        self.app = app
        self.value = replica.encode("latin-1")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(msg) -> None:
            if msg["type"] == "http.response.start":
                msg = dict(msg, headers=list(msg.get("headers") or []) + [(REPLICA_HEADER, self.value)])
            await send(msg)

        await self.app(scope, receive, tagged)


def replica_threads(cfg: ServerConfig) -> int:
    """The engine's compute threads: cfg.n_threads if given, else the CPUs Ray assigned this actor (at least 1)."""
    if cfg.n_threads is not None:
        return int(cfg.n_threads)
    import ray
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    return max(1, int(cpus))


class UbatchReplica:
    """The deployment's class (wrapped by serve.ingress at build time): builds the state, then the app."""

    def __init__(self, cfg: ServerConfig) -> None:
        from ray import serve

        from ubatch.server.state import build_state
        self.cfg = dataclasses.replace(cfg, n_threads=replica_threads(cfg))
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.state = build_state(self.cfg)

    def __serve_build_asgi_app__(self):
        from ubatch.server.app import create_app
        app = create_app(self.state)
        app.add_middleware(ReplicaHeader, replica=self.replica_id)   # outermost: on every response
        return app

    def check_health(self) -> None:
        """Ray Serve's health probe: a replica whose engine thread died is unhealthy (Serve replaces it)."""
        w = self.state.worker
        if w.dead is not None:
            raise RuntimeError(f"ubatch engine thread stopped: {w.dead}")


def _engine_config(model: str, engine_args: dict) -> ServerConfig:
    unknown = sorted(set(engine_args) - _FIELDS)
    if unknown:
        raise TypeError(f"build_app: unknown engine argument(s) {', '.join(unknown)} "
                        f"(ServerConfig fields: {', '.join(sorted(_FIELDS - {'model'}))})")
    return ServerConfig(model=str(model), **engine_args)


def build_app(model: str = "tiny-llama", replicas: int = 1, *, replica_cpus: float = 1.0,
              min_replicas: Optional[int] = None, max_replicas: Optional[int] = None,
              target_ongoing_requests: Optional[float] = None, name: str = "ubatch",
              max_ongoing_requests: Optional[int] = None, graceful_shutdown_timeout_s: Optional[float] = None,
              **engine_args: Any):
    """A Ray Serve Application (for `serve.run(app)`): `replicas` copies of `ubatch serve --model model`, each
    with `replica_cpus` CPUs. engine_args are ServerConfig fields (parallel, n_ctx, n_batch, n_ubatch, n_threads,
    prefix_cache, api_key, max_queue, ...). min_replicas / max_replicas turn on Serve's autoscaling (between the
    bounds, `target_ongoing_requests` per replica, default parallel); otherwise the replica count is fixed."""
    from ray import serve
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
    if not (replica_cpus > 0):
        raise ValueError(f"replica_cpus must be positive, got {replica_cpus!r}")
    cfg = _engine_config(model, engine_args)
    if cfg.parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {cfg.parallel}")
    ongoing = max(int(max_ongoing_requests or 0), cfg.parallel + cfg.max_queue)
    options: dict = dict(name=name, ray_actor_options={"num_cpus": float(replica_cpus)},
                         max_ongoing_requests=ongoing, health_check_period_s=2, health_check_timeout_s=30)
    if graceful_shutdown_timeout_s is None:
        graceful_shutdown_timeout_s = float(cfg.grace_seconds)
    options["graceful_shutdown_timeout_s"] = float(graceful_shutdown_timeout_s)
    if min_replicas is not None or max_replicas is not None:
        lo = replicas if min_replicas is None else int(min_replicas)
        hi = max(lo, replicas) if max_replicas is None else int(max_replicas)
        if lo < 0 or hi < 1 or lo > hi:
            raise ValueError(f"autoscaling bounds: need 0 <= min_replicas <= max_replicas, >= 1; got {lo}, {hi}")
        options["autoscaling_config"] = {
            "min_replicas": lo, "max_replicas": hi, "initial_replicas": min(max(replicas, lo), hi),
            "target_ongoing_requests": float(target_ongoing_requests or cfg.parallel)}
    else:
        options["num_replicas"] = replicas
    cls = serve.deployment(**options)(serve.ingress()(UbatchReplica))
    return cls.bind(cfg)


__all__ = ["build_app", "ReplicaHeader", "REPLICA_HEADER", "UbatchReplica"]
