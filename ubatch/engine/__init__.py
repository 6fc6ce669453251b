"""The engine layer: the decode loop (Context) and what drives it (scheduler, continuous batcher)."""
from ubatch.engine.context import Context

__all__ = ["Context"]
