"""`ubatch bench speculative`: exact speculative decoding against plain decoding, and against llama-cpp-python.

Per prompt set (the shipped code-editing set: a short program quoted, a small change asked, the full updated code
expected; and a prose set with little to copy), on one model (default Qwen2.5-Coder 0.5B, the chat template
rendered once and the same token ids given to everyone), greedy, max_tokens M, single stream, timed in turn for
every prompt (paired: the four runs of a prompt follow each other, so machine load hits all of them alike):

* ubatch: `LLM` without a draft, and with `draft="prompt-lookup"`;
* llama-cpp-python 0.3.36 (when installed): `Llama.create_completion` plain, and with its own
  `LlamaPromptLookupDecoding()` (its defaults: max_ngram_size 2, num_pred_tokens 10) as draft_model.

Reported: generated tokens/s of each (total tokens / total time over the set), the ratios, whether ubatch's
drafted output equals its plain output (it must) and whether llama-cpp-python's drafted output equals its plain
output (it need not: its verified logits come from a batch of several rows). Then `--batched` sequences of the
code set together through one engine, with and without the draft, per-sequence and unified KV: plain and drafted
runs alternate `--batched-repeat` times (fresh engines each time, so no prefix cache carries over) and the best
of each is reported. `--only batched` runs just that part (`--only single` just the single-stream sets); with
--json naming an existing results file, a partial run replaces only its own part of it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np

SETS = ("code", "prose")


def load_set(name: str) -> List[dict]:
    path = os.path.join(os.path.dirname(__file__), "data", f"spec_{name}.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def chat_tokens(tokenizer, content: str) -> List[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    ids = tokenizer.encode(text, add_special=True, parse_special=True)
    bos = getattr(tokenizer, "bos", -1)
    if len(ids) >= 2 and bos >= 0 and ids[0] == bos and ids[1] == bos:
        ids = ids[1:]
    return list(ids)


class UbatchRunner:
    def __init__(self, model, n_threads: Optional[int], draft, n_seq_max: int = 1, n_ctx: int = 4096,
                 kv_unified: bool = False) -> None:
        from ubatch.engine.llm import LLM
        self.llm = LLM(model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_seq_max=n_seq_max, n_threads=n_threads,
                       draft=draft, kv_unified=kv_unified)

    def run(self, prompts: List[List[int]], max_tokens: int):
        t = time.perf_counter()
        outs = self.llm.generate(prompts, max_tokens=max_tokens, temperature=0.0)
        return time.perf_counter() - t, [o.tokens for o in outs]

    def run_one(self, prompt: List[int], max_tokens: int):
        """(seconds, tokens, seconds to the first token) of one greedy completion."""
        from ubatch.engine.llm_engine import SamplingParams
        eng = self.llm.engine
        t = time.perf_counter()
        eng.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0))
        toks, first = [], None
        while eng.has_unfinished_requests():
            for o in eng.step():
                toks += o.outputs[0].token_ids_delta
                if first is None and toks:
                    first = time.perf_counter() - t
        return time.perf_counter() - t, toks, first or 0.0

    def stats(self) -> dict:
        return self.llm.engine.stats()


class LlamaCppRunner:
    def __init__(self, path: str, n_threads: int, pld: bool) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=4096, n_batch=512, n_threads=n_threads,
                                   n_threads_batch=n_threads, verbose=False, logits_all=pld,
                                   draft_model=LlamaPromptLookupDecoding() if pld else None)
        self.vocab = self.llm._model.vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog

    def run_one(self, prompt: List[int], max_tokens: int):
        t = time.perf_counter()
        toks, first = [], None
        for tok in self.llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            if first is None:
                first = time.perf_counter() - t
            if self._is_eog(self.vocab, tok):
                break
            toks.append(int(tok))
            if len(toks) >= max_tokens:
                break
        return time.perf_counter() - t, toks, first or 0.0


def _path_of(name: str) -> str:
    from ubatch.model import fetch
    if os.path.isfile(name):
        return name
    return str(fetch.path(name))


DRAFT_STATS = ("draft_rows", "draft_tokens", "draft_accepted", "acceptance", "cost_a_s", "cost_b_s", "gate_closures",
               "gated_steps", "draft_speedup")


def run_batched(model, tok, batched: int, max_tokens: int, threads: int, repeat: int = 1, progress=None) -> dict:
    """`batched` code prompts through one engine, plain and with prompt lookup, per-sequence then unified KV;
    the two alternate `repeat` times on fresh engines, the best tokens/s of each is kept."""
    items = load_set("code")
    ids = [chat_tokens(tok, items[i % len(items)]["content"]) for i in range(batched)]
    warm = chat_tokens(tok, "Say hi.")
    load0 = _load()
    br = {}
    for kvu in (False, True):
        name = "unified" if kvu else "per-seq"
        best = {"plain": 0.0, "draft": 0.0}
        equal, stats = True, {}
        for _ in range(max(int(repeat), 1)):
            outs = {}
            for kind, draft in (("plain", None), ("draft", "prompt-lookup")):
                r = UbatchRunner(model, threads, draft, n_seq_max=batched, n_ctx=4096 * batched, kv_unified=kvu)
                r.run_one(warm, 2)
                dt, outs[kind] = r.run(ids, max_tokens)
                best[kind] = max(best[kind], sum(len(o) for o in outs[kind]) / dt)
                if draft is not None:
                    st = r.stats()
                    stats = {k: st[k] for k in DRAFT_STATS if k in st}
                r.llm.close()
            equal = equal and outs["plain"] == outs["draft"]
            if progress is not None:
                progress(f"batched {batched} {name}: best {best['plain']:.2f} vs {best['draft']:.2f} tok/s")
        br[name] = {"plain_tok_s": best["plain"], "draft_tok_s": best["draft"], "equal": equal,
                    "draft_stats": stats}
    return {"n": batched, "repeat": max(int(repeat), 1), "load_average": [load0, _load()], **br}


def _load() -> Optional[float]:
    """The 1-minute load average (None where the OS has none): the bench records it beside its figures."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def run_bench(model_name: str, sets: List[str], max_tokens: int, n_prompts: int, batched: int,
              n_threads: Optional[int], llama_cpp: bool, progress=None, llama_threads: Optional[int] = None,
              batched_repeat: int = 1) -> dict:
    from ubatch.engine.llm import load_model
    model = load_model(model_name)
    tok = model.tokenizer
    threads = n_threads or os.cpu_count() or 1
    res: Dict[str, dict] = {"model": model_name, "max_tokens": max_tokens, "threads": threads,
                            "llama_threads": llama_threads or threads, "sets": {}}
    if sets:
        res.update(run_single(model, model_name, tok, sets, max_tokens, n_prompts, threads, llama_cpp, progress,
                              llama_threads))
    else:
        res["llama_cpp"] = False
    if batched > 1:
        res["batched"] = run_batched(model, tok, batched, max_tokens, threads, batched_repeat, progress)
    return res


def run_single(model, model_name: str, tok, sets: List[str], max_tokens: int, n_prompts: int, threads: int,
               llama_cpp: bool, progress, llama_threads: Optional[int]) -> dict:
    """The single-stream sets: {"sets": ..., "draft_stats": ..., "llama_cpp": whether it ran, "load_average"}."""
    load0 = _load()
    runners = {"ubatch": UbatchRunner(model, threads, None), "ubatch+draft": UbatchRunner(model, threads,
                                                                                          "prompt-lookup")}
    have_lcp = False
    if llama_cpp:
        try:
            import llama_cpp as _lcp  # noqa: F401
            have_lcp = True
        except ImportError:
            pass
    if have_lcp:
        path = _path_of(model_name)
        lt = llama_threads or threads
        runners["llama.cpp"] = LlamaCppRunner(path, lt, pld=False)
        runners["llama.cpp+pld"] = LlamaCppRunner(path, lt, pld=True)
    warm = chat_tokens(tok, "Say hi.")
    for r in runners.values():                              # warm-up: weights paged in, threads started
        r.run_one(warm, 4)
    res: Dict[str, dict] = {"sets": {}}
    for set_name in sets:
        items = load_set(set_name)[:n_prompts]
        per = {k: {"s": 0.0, "tokens": 0, "outs": [], "first_s": 0.0} for k in runners}
        for it in items:
            ids = chat_tokens(tok, it["content"])
            for name, r in runners.items():
                dt, out, first = r.run_one(ids, max_tokens)
                per[name]["s"] += dt
                per[name]["first_s"] += first
                per[name]["tokens"] += len(out)
                per[name]["outs"].append(out)
            if progress is not None:
                progress(f"{set_name} {it['id']}: " + ", ".join(
                    f"{k} {len(v['outs'][-1])} tok" for k, v in per.items()))
        n_p = len(items)
        row = {k: {"tok_s": v["tokens"] / v["s"] if v["s"] else 0.0, "tokens": v["tokens"], "s": round(v["s"], 3),
                   "decode_tok_s": (v["tokens"] - n_p) / (v["s"] - v["first_s"]) if v["s"] > v["first_s"] else 0.0,
                   "first_token_s": round(v["first_s"] / max(n_p, 1), 3)}
               for k, v in per.items()}
        row["ubatch_draft_equals_plain"] = per["ubatch+draft"]["outs"] == per["ubatch"]["outs"]
        if have_lcp:
            same = [a == b for a, b in zip(per["llama.cpp+pld"]["outs"], per["llama.cpp"]["outs"])]
            row["llama_cpp_pld_equals_plain"] = f"{sum(same)}/{len(same)}"
        res["sets"][set_name] = row
    spec_stats = runners["ubatch+draft"].stats()
    res["draft_stats"] = {k: spec_stats[k] for k in DRAFT_STATS if k in spec_stats}
    res["llama_cpp"] = have_lcp
    res["load_average"] = [load0, _load()]
    return res


def report(res: dict) -> str:
    lines = [f"ubatch bench speculative: {res['model']}, greedy, max_tokens {res['max_tokens']}, single stream, "
             f"{res['threads']} threads (llama.cpp {res.get('llama_threads', res['threads'])}); paired runs per prompt "
             f"(generated tokens/s, prompt prefill included)"]
    hdr = f"{'set':6} | {'ubatch':>8} {'+draft':>8} | {'llama.cpp':>9} {'+PLD':>8} | {'draft/ub':>8} " \
          f"{'draft/lcp':>9} {'draft/PLD':>9} | {'ub equal':>8} {'lcp PLD equal':>13}"
    lines += [hdr, "-" * len(hdr)]
    for name, row in res["sets"].items():
        u, d = row["ubatch"]["tok_s"], row["ubatch+draft"]["tok_s"]
        lc = row.get("llama.cpp", {}).get("tok_s")
        lp = row.get("llama.cpp+pld", {}).get("tok_s")
        f = lambda x: f"{x:8.2f}" if x else "       -"  # noqa: E731
        r = lambda a, b: f"{a / b:8.2f}x" if a and b else "        -"  # noqa: E731
        lines.append(f"{name:6} | {f(u)} {f(d)} | {f(lc):>9} {f(lp)} | {r(d, u)} {r(d, lc):>9} {r(d, lp):>9} | "
                     f"{str(row['ubatch_draft_equals_plain']):>8} {row.get('llama_cpp_pld_equals_plain', '-'):>13}")
        g = lambda k: row.get(k, {}).get("decode_tok_s")  # noqa: E731
        u2, d2, lc2, lp2 = g("ubatch"), g("ubatch+draft"), g("llama.cpp"), g("llama.cpp+pld")
        lines.append(f"{'  after':6} | {f(u2)} {f(d2)} | {f(lc2):>9} {f(lp2)} | {r(d2, u2)} {r(d2, lc2):>9} "
                     f"{r(d2, lp2):>9} |   (after the first token: the prompt's prefill left out)")
    ds = res.get("draft_stats", {})
    if ds:
        lines.append(f"ubatch draft: {ds.get('draft_tokens', 0)} draft tokens, {ds.get('draft_accepted', 0)} accepted "
                     f"({100 * ds.get('acceptance', 0):.0f} %), step cost model a = {1000 * ds.get('cost_a_s', 0):.1f} ms"
                     f" per ubatch + b = {1000 * ds.get('cost_b_s', 0):.2f} ms per row")
    b = res.get("batched")
    if b:
        for k in ("per-seq", "unified"):
            if k in b:
                x = b[k]
                lines.append(f"{b['n']} batched code prompts, {k} KV: {x['plain_tok_s']:.2f} tok/s without a draft, "
                             f"{x['draft_tok_s']:.2f} with ({x['draft_tok_s'] / x['plain_tok_s']:.2f}x), "
                             f"equal: {x['equal']} (best of {b.get('repeat', 1)})")
                st = x.get("draft_stats") or {}
                if st:
                    lines.append(f"  draft: {st.get('draft_tokens', 0)} tokens, {100 * st.get('acceptance', 0):.0f} % "
                                 f"accepted, cost a = {1000 * st.get('cost_a_s', 0):.1f} ms + b = "
                                 f"{1000 * st.get('cost_b_s', 0):.2f} ms per row, measured speedup of the drafted "
                                 f"steps {st.get('draft_speedup', 1.0):.2f}x, gate closed {st.get('gate_closures', 0)}"
                                 f" times ({st.get('gated_steps', 0)} plain steps)")
        if b.get("load_average"):
            lines.append(f"  load average (1 min) at the start and the end of the batched runs: {b['load_average']}")
    if res.get("sets") and not res.get("llama_cpp"):
        lines.append("llama-cpp-python is not installed: its columns are empty")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-0.5b", help="model name or GGUF path (default qwen2.5-0.5b)")
    p.add_argument("--sets", default="code,prose", help="prompt sets (code, prose)")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--prompts", type=int, default=8, help="prompts per set (default all 8)")
    p.add_argument("--batched", type=int, default=8, help="sequences of the batched run (0: skip)")
    p.add_argument("--batched-repeat", type=int, default=1,
                   help="plain and drafted batched runs alternate this many times; the best of each is kept")
    p.add_argument("--only", choices=("all", "single", "batched"), default="all",
                   help="run only the single-stream sets or only the batched runs (default all)")
    p.add_argument("--threads", type=int, default=None, help="ubatch's threads (default: all cores)")
    p.add_argument("--llama-threads", type=int, default=None,
                   help="llama-cpp-python's threads (default: --threads; on a loaded machine its spinning thread "
                        "pool is far faster with 1)")
    p.add_argument("--no-llama-cpp", action="store_true", help="skip llama-cpp-python")
    p.add_argument("--json", metavar="FILE", default=None, help="write the results as JSON")


def main_args(args, progress=None) -> int:
    sets = [s for s in args.sets.split(",") if s]
    bad = [s for s in sets if s not in SETS]
    only = getattr(args, "only", "all")
    repeat = getattr(args, "batched_repeat", 1)
    if bad or args.max_tokens < 1 or args.prompts < 1 or args.batched < 0 or repeat < 1 or \
            (only == "batched" and args.batched < 2):
        print(f"ubatch bench speculative: --sets from {SETS}, --max-tokens / --prompts / --batched-repeat >= 1, "
              f"--batched >= 0 (>= 2 with --only batched)", file=sys.stderr)
        return 2
    if only == "batched":
        sets = []
    res = run_bench(args.model, sets, args.max_tokens, args.prompts, 0 if only == "single" else args.batched,
                    args.threads, not args.no_llama_cpp, progress, llama_threads=args.llama_threads,
                    batched_repeat=repeat)
    print(report(res))
    if args.json:
        if only != "all" and os.path.isfile(args.json):      # a partial run updates its part of the results
            with open(args.json) as f:
                old = json.load(f)
            keep = ("batched",) if only == "single" else ("sets", "draft_stats", "llama_cpp", "llama_threads",
                                                          "load_average")
            res = {**res, **{k: old[k] for k in keep if k in old}}
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {args.json}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ubatch bench speculative", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return main_args(args, progress=lambda m: print(m, file=sys.stderr, flush=True))


if __name__ == "__main__":
    sys.exit(main())
