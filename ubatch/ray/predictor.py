"""LLMPredictor: batch inference on Ray Data.

    ds.map_batches(LLMPredictor, fn_constructor_kwargs={"model": "gemma3-270m", "max_tokens": 64},
                   concurrency=4, batch_size=32)

Each actor of the pool holds one ubatch.LLM; a batch's prompts are decoded together with continuous batching.
Batch invariance makes every row's result bitwise the one `ubatch.LLM(model).generate([prompt], **sampling)` gives
alone, whatever the batch_size, the concurrency or the other rows of the batch."""
from __future__ import annotations

import inspect
from typing import Any, Dict, Optional

import numpy as np

from ubatch.engine.llm import LLM

_ENGINE = set(inspect.signature(LLM.__init__).parameters) - {"self", "model"}
_SAMPLING = set(inspect.signature(LLM._params).parameters) - {"extra"}


def _assigned_cpus() -> Optional[int]:
    try:
        import ray
        if not ray.is_initialized():
            return None
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:   # not inside a Ray worker
        return None
    return max(1, int(cpus)) if cpus else None


class LLMPredictor:
    """Callable class for map_batches: reads column `prompt` (str or token ids), adds `generated_text` (str) and
    `num_generated_tokens` (int). Constructor: the model (name or GGUF path), LLM's engine arguments (n_ctx,
    n_seq_max, n_threads, ...: n_threads defaults to the CPUs Ray assigned the actor) and the sampling parameters
    of LLM.generate (max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop)."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _ENGINE - _SAMPLING)
        if unknown:
            raise TypeError(f"LLMPredictor: unknown argument(s) {', '.join(unknown)}; engine arguments: "
                            f"{', '.join(sorted(_ENGINE))}; sampling: {', '.join(sorted(_SAMPLING))}")
        if kwargs.get("n", 1) != 1:
            raise ValueError(f"LLMPredictor gives one completion per row: n must be 1, got {kwargs['n']}")
        engine = {k: v for k, v in kwargs.items() if k in _ENGINE}
        self.sampling = {k: v for k, v in kwargs.items() if k in _SAMPLING}
        if engine.get("n_threads") is None:
            engine["n_threads"] = _assigned_cpus()
        self.llm = LLM(model, **engine)

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if "prompt" not in batch:
            raise KeyError(f"LLMPredictor: the batch has no 'prompt' column (columns: {', '.join(batch)})")
        prompts = [p if isinstance(p, str) else [int(t) for t in p] for p in batch["prompt"]]
        outs = self.llm.generate(prompts, **self.sampling)
        out = dict(batch)
        out["generated_text"] = np.array([c.text for c in outs], dtype=object)
        out["num_generated_tokens"] = np.array([len(c.tokens) for c in outs], dtype=np.int64)
        return out


__all__ = ["LLMPredictor"]
