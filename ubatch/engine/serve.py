"""`ubatch.serve`, token-level continuous batching on top of Context (the loop of the decode benchmarks): the
pieces live in request.py (Request, make_requests), scheduler.py (Scheduler, StepBatch) and batcher.py
(ContinuousBatcher, RunStats); this module re-exports them. Text generation is ubatch.engine.llm_engine."""
from ubatch.engine.batcher import ContinuousBatcher, RunStats, UbatchRecord
from ubatch.engine.request import (EVICTED, FINISHED, GENERATING, PROMPT, REJECTED, WAITING, Request, make_requests,
                                   parse_range)
from ubatch.engine.scheduler import Scheduler, StepBatch

__all__ = ["ContinuousBatcher", "EVICTED", "FINISHED", "GENERATING", "PROMPT", "REJECTED", "Request", "RunStats",
           "Scheduler", "StepBatch", "UbatchRecord", "WAITING", "make_requests", "parse_range"]
