"""The engine thread: the one thread that owns the LLMEngine (and so its Context and KV cache).

The event loop never touches the engine. It `submit`s requests (refused at once with 429 + Retry-After when
`capacity` requests are already in flight, 503 while draining), and `cancel`s those whose client went
away. The engine thread, in a loop: takes the new submissions and cancellations (add_request /
abort_request: an aborted sequence's KV cells are freed before the next step), runs queued embedding
jobs, then one `step()` (one token of every generating sequence plus prompt chunks), and posts each
request's progress back to the event loop with one call_soon_threadsafe per step. A step that raises fails
the requests that had a sequence in it (500; those still queued in the engine go on) and the loop goes on;
the server stays up. Should the thread itself die (an exception no handler catches), every request it held
fails at once with 503 `engine_dead`, later ones are refused the same way and /health reports it."""
from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ubatch.server.errors import APIError
from ubatch.server.metrics import Metrics

log = logging.getLogger("ubatch.server")


@dataclass
class Choice:
    """One sequence's progress in one step (a copy: the engine's objects never cross threads)."""
    index: int
    text_delta: str
    token_ids_delta: List[int]
    finish_reason: Optional[str]
    logprobs_delta: Any


@dataclass
class Progress:
    finished: bool
    prompt_tokens: int
    choices: List[Choice]


class Handle:
    """The event-loop side of one request: events arrive on `events` (an asyncio.Queue).

    Items are (handle, event) so that several handles can share one queue. Events: ("accepted",
    prompt_tokens) once, then ("progress", Progress) until one is finished, or
    ("error", APIError) at any point; embedding jobs get ("embeddings", float32[n, n_embd])."""

    def __init__(self, rid: str, kind: str, events: Optional[asyncio.Queue] = None, tag: int = 0) -> None:
        self.rid = rid
        self.kind = kind
        self.tag = tag             # the consumer's index of this request (prompt number)
        self.events: asyncio.Queue = events if events is not None else asyncio.Queue()
        self.done = False          # set by the consumer once it saw the final event
        self.field = "prompt"      # the request field a refusal of the prompt names ("messages" for chat)


@dataclass
class _Job:
    handle: Handle
    prompt: Any = None             # token ids (generation) or a list of token-id lists (embeddings)
    params: Any = None


def _snapshot(out) -> Progress:
    return Progress(bool(out.finished), int(out.prompt_tokens),
                    [Choice(int(c.index), c.text_delta or "", list(c.token_ids_delta or ()), c.finish_reason,
                            list(c.logprobs_delta) if c.logprobs_delta is not None else None)
                     for c in out.outputs])


class EngineWorker:
    def __init__(self, engine, metrics: Metrics, *, capacity: int, retry_after: int = 1,
                 embedder: Optional[Callable[[List[List[int]]], Any]] = None,
                 prompt_too_long: Tuple[type, ...] = ()) -> None:
        self.engine = engine
        self.metrics = metrics
        self.capacity = int(capacity)
        self.retry_after = int(retry_after)
        self.embedder = embedder
        self._too_long = prompt_too_long
        self._lock = threading.Condition()
        self._inbox: List[_Job] = []
        self._cancels: List[str] = []
        self._inflight = 0
        self._live: Dict[str, _Job] = {}           # engine thread only
        self._in_hand: List[_Job] = []             # engine thread only: the submissions of the current round
        self._stop = False
        self.draining = False
        self.dead: Optional[str] = None            # why the engine thread stopped unexpectedly (None: it did not)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._ids = itertools.count()
        self.published: Dict[str, float] = {"waiting": 0, "running": 0, "kv_cells_used": 0, "inbox": 0,
                                            "inflight": 0, "live": 0}

    # ---- event-loop side ---------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="ubatch-engine", daemon=True)
        self._thread.start()

    def _admit(self, kind: str, prompt, params, events, tag, field: str = "prompt") -> Handle:
        h = Handle(f"{kind}-{next(self._ids)}-{time.monotonic_ns() % 10**9}", kind, events, tag)
        h.field = field
        with self._lock:
            if self.dead is not None or not self.alive():
                raise APIError(503, "the engine thread has stopped; the server cannot generate (see /health)",
                               code="engine_dead")
            if self._stop or self.draining:
                raise APIError(503, "the server is shutting down and accepts no new requests",
                               code="shutting_down", headers={"Retry-After": str(self.retry_after)})
            if self._inflight >= self.capacity:
                raise APIError(429, f"the server is at capacity ({self.capacity} requests in flight); retry "
                                    f"after {self.retry_after} s", code="queue_full",
                               headers={"Retry-After": str(self.retry_after)})
            self._inflight += 1
            self._inbox.append(_Job(h, prompt, params))
            self._lock.notify()
        return h

    def submit(self, prompt: List[int], params, events: Optional[asyncio.Queue] = None, tag: int = 0,
               field: str = "prompt") -> Handle:
        return self._admit("cmpl", prompt, params, events, tag, field)

    def submit_embeddings(self, inputs: List[List[int]], events: Optional[asyncio.Queue] = None) -> Handle:
        return self._admit("embd", inputs, None, events, 0)

    def cancel(self, handle: Handle) -> None:
        """The client is gone: the request leaves the engine (and the KV cache) before the next step."""
        if handle.done:
            return
        handle.done = True
        with self._lock:
            self._cancels.append(handle.rid)
            self._lock.notify()

    def alive(self) -> bool:
        """False once the engine thread was started and is gone without being asked to stop."""
        if self.dead is not None:
            return False
        t = self._thread
        return t is None or t.is_alive() or self._stop

    def begin_drain(self) -> None:
        self.draining = True

    def idle(self) -> bool:
        with self._lock:
            return self._inflight == 0

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- engine thread -----------------------------------------------------------------------------------
    def _post(self, batch: List[Tuple[Handle, tuple]]) -> None:
        if not batch or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(_deliver, batch)
        except RuntimeError:   # the loop is closed: nobody is waiting any more
            pass

    def _release(self, n: int = 1) -> None:
        with self._lock:
            self._inflight -= n

    def _run(self) -> None:
        try:
            self._loop_forever()
        except BaseException as e:   # the engine thread must not vanish silently: fail everything, refuse more
            log.critical("the engine thread died: %s\n%s", e, traceback.format_exc())
            self._die(e)

    def _die(self, exc: BaseException) -> None:
        err = APIError(503, "the engine thread has stopped; the server cannot generate (see /health)",
                       code="engine_dead")
        with self._lock:
            self.dead = type(exc).__name__
            inbox, self._inbox = self._inbox, []
            self._cancels = []
        held = [j for j in self._in_hand if j.handle.rid not in self._live]   # taken, not yet in the engine
        posts = [(job.handle, ("error", err)) for job in inbox + held]
        posts += [(job.handle, ("error", err)) for job in self._live.values()]
        self._in_hand = []
        self._live.clear()
        with self._lock:
            self._inflight = 0
        self.metrics.event("step_failures")
        self._post(posts)

    def _loop_forever(self) -> None:
        eng = self.engine
        while True:
            with self._lock:
                while not (self._inbox or self._cancels or self._stop or eng.has_unfinished_requests()):
                    self._lock.wait(1.0)
                inbox, self._inbox = self._inbox, []
                cancels, self._cancels = self._cancels, []
                stopping = self._stop
            self._in_hand = inbox
            posts: List[Tuple[Handle, tuple]] = []
            if stopping:
                self._shutdown(inbox, posts)
                self._post(posts)
                return
            self._cancel(cancels, inbox, posts)
            embeds = [j for j in inbox if j.handle.kind == "embd"]
            for job in inbox:
                if job.handle.kind == "cmpl":
                    self._add(job, posts)
            self._post(posts)
            posts = []
            for job in embeds:
                self._embed(job, posts)
            if eng.has_unfinished_requests():
                self._step(posts)
            self._publish()
            self._post(posts)

    def _cancel(self, cancels: List[str], inbox: List[_Job], posts) -> None:
        gone = set(cancels)
        for job in [j for j in inbox if j.handle.rid in gone]:
            inbox.remove(job)
            self._release()
            self.metrics.event("cancelled")
        for rid in gone:
            if rid in self._live:
                del self._live[rid]
                try:
                    self.engine.abort_request(rid)
                except Exception:
                    log.exception("abort_request(%s) failed", rid)
                self._release()
                self.metrics.event("cancelled")

    def _add(self, job: _Job, posts) -> None:
        h = job.handle
        try:
            self.engine.add_request(job.prompt, job.params, request_id=h.rid)
        except self._too_long as e:
            posts.append((h, ("error", APIError(400, f"{h.field}: {e}", param=h.field,
                                                code="context_length_exceeded"))))
            self._release()
            return
        except (ValueError, TypeError) as e:
            posts.append((h, ("error", APIError(400, str(e), param=_field_of(str(e))))))
            self._release()
            return
        except Exception as e:
            log.exception("add_request failed")
            posts.append((h, ("error", APIError(500, "the engine could not take the request (internal error; "
                                                     "see the server log)"))))
            self._release()
            return
        self._live[h.rid] = job
        self.metrics.tokens(prompt=len(job.prompt))
        posts.append((h, ("accepted", len(job.prompt))))

    def _embed(self, job: _Job, posts) -> None:
        try:
            if self.embedder is None:
                raise APIError(400, "this server computes no embeddings", param="input")
            posts.append((job.handle, ("embeddings", self.embedder(job.prompt))))
        except APIError as e:
            posts.append((job.handle, ("error", e)))
        except ValueError as e:
            posts.append((job.handle, ("error", APIError(400, str(e), param="input"))))
        except Exception as e:
            log.exception("embedding failed")
            posts.append((job.handle, ("error", APIError(500, "embedding failed (internal error; see the server "
                                                              "log)"))))
        finally:
            self._release()

    def _step(self, posts) -> None:
        t0 = time.perf_counter()
        try:
            outs = self.engine.step()
        except Exception as e:
            self._fail_live(e, posts)
            return
        dt = time.perf_counter() - t0
        generated, seqs = 0, 0
        for out in outs:
            job = self._live.get(out.request_id)
            prog = _snapshot(out)
            n = sum(len(c.token_ids_delta) for c in prog.choices)
            generated += n
            seqs += sum(1 for c in prog.choices if c.token_ids_delta)
            if job is None:
                continue
            posts.append((job.handle, ("progress", prog)))
            if prog.finished:
                del self._live[out.request_id]
                self._release()
        self.metrics.tokens(generated=generated)
        self.metrics.step(dt, seqs)

    def _waiting_ids(self) -> set:
        """Requests the engine still holds in its queue (no sequence yet, so in no decode)."""
        return {str(rid) for rid in self.engine.waiting_request_ids()}

    def _fail_live(self, exc: BaseException, posts) -> None:
        """A step raised: the requests that had a sequence in that decode fail (500) and leave the engine;
        those still queued in the engine were in no decode and go on."""
        self.metrics.event("step_failures")
        log.error("engine step failed: %s\n%s", exc, traceback.format_exc())
        queued = self._waiting_ids()
        err = APIError(500, "decoding failed (internal error; see the server log)", code="decode_failed")
        for rid, job in list(self._live.items()):
            if rid in queued:
                continue
            try:
                self.engine.abort_request(rid)
            except Exception:
                log.exception("abort_request(%s) after a failed step", rid)
            posts.append((job.handle, ("error", err)))
            del self._live[rid]
            self._release()

    def _shutdown(self, inbox: List[_Job], posts) -> None:
        err = APIError(503, "the server shut down before the request finished", code="shutting_down")
        for job in inbox:
            posts.append((job.handle, ("error", err)))
            self._release()
        for rid, job in list(self._live.items()):
            try:
                self.engine.abort_request(rid)
            except Exception:
                log.exception("abort_request(%s) at shutdown", rid)
            posts.append((job.handle, ("error", err)))
            self._release()
        self._live.clear()
        self._publish()

    def _publish(self) -> None:
        try:
            st = dict(self.engine.stats())
        except Exception:
            st = {}
        with self._lock:
            st["inbox"] = len(self._inbox)
            st["inflight"] = self._inflight
        st["live"] = len(self._live)
        self.published = st


def _field_of(message: str) -> Optional[str]:
    """The field a ValueError from the engine names (its messages start with the field name)."""
    head = message.split(" ", 1)[0].strip(":=,")
    return head if head.isidentifier() else None


def _deliver(batch: List[Tuple[Handle, tuple]]) -> None:
    for h, ev in batch:
        h.events.put_nowait((h, ev))
