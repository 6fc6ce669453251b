"""The event-loop side of a generation: submit every prompt, wait until the engine accepted them all (so a
refusal such as a prompt longer than the context is still a 4xx before any byte of the answer), then either
collect the whole answer or yield it piece by piece. Whatever ends the wait early (the client went away,
an error, cancellation at shutdown) cancels the requests still in the engine."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import AsyncIterator, Dict, List, Optional, Tuple

from starlette.requests import Request

from ubatch.server.worker import EngineWorker, Handle, Progress

_DISCONNECT = ("disconnect", None)


@dataclass
class ChoiceState:
    index: int
    text: List[str] = field(default_factory=list)
    token_ids: List[int] = field(default_factory=list)
    logprobs: List = field(default_factory=list)
    finish_reason: Optional[str] = None


class Generation:
    """One HTTP request's engine requests (one per prompt; each may have n choices)."""

    def __init__(self, worker: EngineWorker, prompts: List[List[int]], params, n: int, field: str = "prompt") -> None:
        self.field = field
        self.worker = worker
        self.prompts = prompts
        self.params = params
        self.n = n
        self.events: asyncio.Queue = asyncio.Queue()
        self.handles: List[Handle] = []
        self.prompt_tokens = 0
        self.choices: Dict[int, ChoiceState] = {}
        self._open = 0
        self._watch: Optional[asyncio.Task] = None
        self._held: List[tuple] = []       # events that arrived before the last acceptance

    async def start(self) -> None:
        """Submit and wait for every acceptance; APIError (429, 400, ...) with nothing left in the engine."""
        try:
            for i, p in enumerate(self.prompts):
                self.handles.append(self.worker.submit(p, self.params, self.events, tag=i,
                                                      field=self.field if len(self.prompts) == 1 else
                                                      f"{self.field}.{i}"))
            self._open = len(self.handles)
            accepted = 0
            while accepted < len(self.handles):
                h, (kind, payload) = await self.events.get()
                if kind == "error":
                    h.done = True
                    raise payload
                if kind == "accepted":
                    accepted += 1
                    self.prompt_tokens += payload
                else:                        # progress can overtake the other acceptances
                    self._held.append((h, (kind, payload)))
        except BaseException:
            self.cancel()
            raise

    def watch_disconnect(self, request: Request) -> None:
        """Non-streaming answers: a task that turns the client's disconnect into an event."""
        async def watch() -> None:
            while True:
                msg = await request.receive()
                if msg["type"] == "http.disconnect":
                    self.events.put_nowait((None, _DISCONNECT))
                    return
        self._watch = asyncio.ensure_future(watch())

    def cancel(self) -> None:
        for h in self.handles:
            self.worker.cancel(h)          # no-op for the finished ones
        if self._watch is not None:
            self._watch.cancel()

    def _choice(self, h: Handle, index: int) -> ChoiceState:
        k = h.tag * self.n + index
        st = self.choices.get(k)
        if st is None:
            st = self.choices[k] = ChoiceState(k)
        return st

    async def deltas(self) -> AsyncIterator[List[Tuple[ChoiceState, str, List[int], list]]]:
        """Yields, per engine step that concerned this request, [(choice, text_delta, ids_delta, logprobs)],
        until every prompt finished; raises APIError on an engine error, ConnectionError on a disconnect."""
        try:
            while self._open:
                h, (kind, payload) = self._held.pop(0) if self._held else await self.events.get()
                if kind == "disconnect":
                    raise ConnectionError("the client disconnected")
                if kind == "error":
                    h.done = True
                    raise payload
                if kind != "progress":
                    continue
                prog: Progress = payload
                step = []
                for c in prog.choices:
                    st = self._choice(h, c.index)
                    st.text.append(c.text_delta)
                    st.token_ids.extend(c.token_ids_delta)
                    if c.logprobs_delta:
                        st.logprobs.extend(c.logprobs_delta)
                    if c.finish_reason is not None:
                        st.finish_reason = c.finish_reason
                    step.append((st, c.text_delta, c.token_ids_delta, c.logprobs_delta or []))
                if prog.finished:
                    h.done = True
                    self._open -= 1
                yield step
        finally:
            self.cancel()

    async def collect(self) -> None:
        async for _ in self.deltas():
            pass

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.choices.values())

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}
