"""ubatch on Ray (the [ray] extra: `pip install 'ubatch[ray]'`): scale out beyond one machine.

Files, one job each:
  deployment.py  build_app(): the OpenAI app of `ubatch serve` as a Ray Serve deployment (N replicas, one engine each)
  predictor.py   LLMPredictor: a callable class for ray.data.Dataset.map_batches (batch inference)
  launch.py      `ubatch serve --ray`: join or start a cluster, run the app behind Serve's HTTP proxy, SIGTERM

Ray is imported only when one of these is used: `import ubatch` and `ubatch serve` without --ray never need it.
"""
from __future__ import annotations

__all__ = ["build_app", "LLMPredictor"]


def __getattr__(name: str):
    if name == "build_app":
        from ubatch.ray.deployment import build_app
        return build_app
    if name == "LLMPredictor":
        from ubatch.ray.predictor import LLMPredictor
        return LLMPredictor
    raise AttributeError(f"module 'ubatch.ray' has no attribute {name!r}")
