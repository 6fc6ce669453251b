"""What a step reports (RequestOutput / CompletionOutput) is built lazily: the engine hands out a snapshot of every
touched request each step, and copying its prompt, tokens and text so far would cost O(length) per request and
step. The snapshots read exactly what an eager copy at that step would have held, whenever they are read, and
they are still the dataclasses the API describes (fields, ==, repr, defaults, copy, pickle)."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from ubatch.engine.llm_engine import LLMEngine
from ubatch.engine.sampling import SamplingParams
from ubatch.engine.sequence import CompletionOutput, RequestOutput
from ubatch.models import tiny_llama

MODEL = tiny_llama()


def run_engine(n_threads=1):
    eng = LLMEngine(MODEL, n_ctx=2048, n_seq_max=4, n_threads=n_threads)
    prompts = {}
    for i in range(5):
        p = [(13 * i + 5 * j) % 256 for j in range(20 + 7 * i)]
        kw = dict(max_tokens=40 + 9 * i, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=i, n=1 + (i == 2))
        if i == 1:
            kw["stop"] = ["\ufffd\ufffd\ufffd", "ab"] + [chr(c) for c in range(48, 127)]   # it ends on one
        rid = eng.add_request(p, SamplingParams(**kw))
        prompts[rid] = p
    steps = []
    while eng.has_unfinished_requests():
        steps.append(eng.step())
    eng.close()
    return steps, prompts


def test_snapshots_read_later_equal_the_deltas_so_far():
    steps, prompts = run_engine()
    seen_stop = False
    # read every snapshot only after the whole run (their sources have grown since), in a scrambled order
    flat = [o for st in steps for o in st]
    for o in flat[::-1]:
        assert o.prompt_token_ids == prompts[o.request_id] and o.prompt_tokens == len(prompts[o.request_id])
    acc = {}
    for o in flat:
        for c in o.outputs:
            text, toks = acc.get((o.request_id, c.index), ("", []))
            text, toks = text + c.text_delta, toks + c.token_ids_delta
            acc[(o.request_id, c.index)] = (text, toks)
            assert c.text == text and c.token_ids == toks
            seen_stop |= c.finish_reason == "stop"
    assert seen_stop, "no completion ended on its stop string: the stop path went untested"
    # each read builds its value once and keeps it: the lists handed out are the caller's to change
    o = flat[-1]
    o.prompt_token_ids.append(-1)
    assert o.prompt_token_ids[-1] == -1
    o.outputs[0].token_ids.append(-7)
    assert o.outputs[0].token_ids[-1] == -7


def test_the_same_results_as_an_eager_run_on_two_threads():
    a, _ = run_engine(1)
    b, _ = run_engine(2)
    assert [[dataclasses.asdict(o) for o in st] for st in a] == [[dataclasses.asdict(o) for o in st] for st in b]


def test_still_plain_dataclasses():
    steps, _ = run_engine()
    o = steps[-1][0]
    eager = RequestOutput(o.request_id, o.prompt_tokens, o.finished,
                          [CompletionOutput(c.index, c.text, list(c.token_ids), c.text_delta, c.token_ids_delta,
                                            c.finish_reason, c.logprobs_delta) for c in o.outputs],
                          list(o.prompt_token_ids))
    lazy = steps[-1][0]
    assert dataclasses.is_dataclass(lazy) and [f.name for f in dataclasses.fields(CompletionOutput)] == [
        "index", "text", "token_ids", "text_delta", "token_ids_delta", "finish_reason", "logprobs_delta"]
    assert lazy == eager and repr(lazy) == repr(eager)
    # snapshots not read yet: copy / pickle build them
    fresh = run_engine()[0][-1][0]
    assert copy.deepcopy(fresh) == eager and pickle.loads(pickle.dumps(fresh)) == eager
    assert copy.copy(run_engine()[0][-1][0].outputs[0]) == eager.outputs[0]
    # defaults as before
    assert CompletionOutput(0) == CompletionOutput(0, "", [], "", [], None, None)
    assert CompletionOutput.text == "" and RequestOutput("r", 1, True, []).prompt_token_ids == []
    with pytest.raises(AttributeError):
        CompletionOutput.token_ids                 # a default_factory field has no class attribute
    c = CompletionOutput(1)
    c.text = "set"
    assert c.text == "set"
