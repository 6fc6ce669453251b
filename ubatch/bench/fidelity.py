"""`ubatch bench fidelity`: ubatch and llama.cpp measured against the float64 reference forward
(ubatch.testing.reference) on the recorded prompt set (ubatch.bench.fidelity_data), per model.

For every recorded row, over llama.cpp's 64 stored ids (the only logits of llama.cpp's row we have):
  e_ub  = max |ubatch - ref|,   e_lc = max |llama.cpp - ref|   (ref: the emulating reference, same K/V type)
  e_ns  = max |ref_k - ref| over an ensemble: the same graph computed in float32 arithmetic
          (forward(dtype=float32)) and, on short prompts, references whose format roundings see float32-sized
          noise (forward(noise=(k, 2^-24))): how far last-bit differences alone move that row — the floor of
          any float32 implementation.
and where ubatch's and llama.cpp's argmax differ, which one the reference's argmax (full row) agrees with.

    python -m ubatch.bench.fidelity [--models qwen2.5-0.5b,gemma3-270m] [--cases a,b] [--kv f32,f16]
                                    [--short] [--ensemble N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from ubatch.bench import fidelity_data as fd

NOISE_EPS = 2.0 ** -24


def ubatch_rows(m, tokens: List[int], rows: np.ndarray, kv: str) -> np.ndarray:
    """ubatch's float32 logits of `rows` of one sequence's prompt (one decode call, n_ubatch 512)."""
    import ubatch
    from ubatch import Batch
    n = len(tokens)
    ctx = ubatch.Context(m, n_ctx=max(512, -(-n // 256) * 256), n_batch=max(512, n), n_ubatch=512, n_seq_max=1,
                         type_k=kv, type_v=kv, n_threads=2)
    flags = np.zeros(n, np.int32)
    flags[rows] = 1
    if ctx.decode(Batch.from_arrays(tokens=tokens, pos=list(range(n)), seq_ids=[[0]] * n,
                                    output=flags.tolist())) != 0:
        raise RuntimeError("ubatch decode failed")
    return np.stack([ctx.get_logits_ith(int(i)) for i in rows])


def measure_case(um, rm, model: str, case: str, c: dict, kv: str, ensemble: int) -> dict:
    from ubatch.testing.reference import forward
    rows, ids, vals = fd.llama_rows(model, case, kv)
    toks = c["tokens"]
    t0 = time.time()
    ub = ubatch_rows(um, toks, rows, kv)
    ref = forward(rm, toks, mode="emulate", kv=kv, out_rows=rows)
    # the noise floor: the same graph in float32 arithmetic, then (short prompts) references whose format
    # roundings see float32-sized jitter
    ens = [forward(rm, toks, mode="emulate", kv=kv, out_rows=rows, dtype=np.float32)] if ensemble > 0 else []
    if c["kind"] == "short":
        ens += [forward(rm, toks, mode="emulate", kv=kv, out_rows=rows, noise=(k + 1, NOISE_EPS))
                for k in range(ensemble - 1)]
    sel = np.arange(rows.size)[:, None]
    r_at = ref[sel, ids]
    e_ub = np.abs(ub[sel, ids] - r_at).max(axis=1)
    e_lc = np.abs(vals - r_at).max(axis=1)
    e_ns = np.max([np.abs(e[sel, ids] - r_at).max(axis=1) for e in ens], axis=0) if ens else np.full(rows.size, np.nan)
    am_ub, am_lc, am_ref = ub.argmax(axis=1), ids[:, 0], ref.argmax(axis=1)
    ref_sorted = np.sort(ref, axis=1)
    diff = np.flatnonzero(am_ub != am_lc)
    flips = [dict(row=int(rows[i]), ubatch=int(am_ub[i]), llama_cpp=int(am_lc[i]), reference=int(am_ref[i]),
                  ref_margin=float(ref_sorted[i, -1] - ref_sorted[i, -2]),
                  ref_ub_minus_lc=float(ref[i, am_ub[i]] - ref[i, am_lc[i]]),
                  lc_margin=float(vals[i, 0] - vals[i, 1]),
                  ens_argmax=[int(e[i].argmax()) for e in ens]) for i in diff]
    return dict(model=model, case=case, kv=kv, kind=c["kind"], n_tokens=len(toks), rows=rows.tolist(),
                e_ub=e_ub.tolist(), e_lc=e_lc.tolist(), e_ns=e_ns.tolist(), argmax_ub=am_ub.tolist(),
                argmax_lc=am_lc.tolist(), argmax_ref=am_ref.tolist(),
                ref_margin=(ref_sorted[:, -1] - ref_sorted[:, -2]).tolist(),
                argmax_ub_ref=int((am_ub == am_ref).sum()), argmax_lc_ref=int((am_lc == am_ref).sum()),
                flips=flips, seconds=time.time() - t0)


def summarize(results: List[dict]) -> dict:
    e_ub = np.concatenate([r["e_ub"] for r in results])
    e_lc = np.concatenate([r["e_lc"] for r in results])
    e_ns = np.concatenate([r["e_ns"] for r in results])
    flips = [f for r in results for f in r["flips"]]
    q = lambda a: [float(np.nanpercentile(a, p)) for p in (50, 90)] + [float(np.nanmax(a))]
    return dict(rows=int(e_ub.size), frac_ub_le_lc=float((e_ub <= e_lc).mean()),
                frac_ub_le_lc_or_noise=float((e_ub <= np.fmax(e_lc, e_ns)).mean()),
                frac_lc_le_ub_or_noise=float((e_lc <= np.fmax(e_ub, e_ns)).mean()),
                ub=q(e_ub), lc=q(e_lc), noise=q(e_ns) if np.isfinite(e_ns).any() else None,
                argmax_ub_ref=sum(r["argmax_ub_ref"] for r in results),
                argmax_lc_ref=sum(r["argmax_lc_ref"] for r in results),
                flips=len(flips), flips_ref_ub=sum(f["reference"] == f["ubatch"] for f in flips),
                flips_ref_lc=sum(f["reference"] == f["llama_cpp"] for f in flips))


def _fmt(q) -> str:
    return "—" if q is None else " / ".join(f"{v:.2f}" for v in q)


def print_table(model: str, groups: Dict[str, dict], out=sys.stdout) -> None:
    print(f"\n{model}: per-row max |x - ref| over llama.cpp's top-64 ids (p50 / p90 / max)", file=out)
    print("| rows | ubatch | llama.cpp | float32 floor | ubatch ≤ llama.cpp | ubatch ≤ max(llama.cpp, floor) | "
          "argmax = ref (ub / lc) | argmax ub ≠ lc: ref sides ub / lc / neither |", file=out)
    print("|---|---|---|---|---|---|---|---|", file=out)
    for name, s in groups.items():
        print(f"| {name}: {s['rows']} | {_fmt(s['ub'])} | {_fmt(s['lc'])} | {_fmt(s['noise'])} | "
              f"{100 * s['frac_ub_le_lc']:.0f} % | {100 * s['frac_ub_le_lc_or_noise']:.0f} % | "
              f"{s['argmax_ub_ref']} / {s['argmax_lc_ref']} | "
              f"{s['flips_ref_ub']} / {s['flips_ref_lc']} / {s['flips'] - s['flips_ref_ub'] - s['flips_ref_lc']} |",
              file=out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(fd.MODELS), help="comma-separated (default both)")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default all recorded)")
    ap.add_argument("--kv", default="f32,f16", help="K/V types to measure (default f32,f16)")
    ap.add_argument("--short", action="store_true", help="short prompts only (tens of minutes on 2 cores)")
    ap.add_argument("--ensemble", type=int, default=2,
                    help="noise-floor references per case: a float32-arithmetic one, then N-1 with jittered "
                         "format roundings on short prompts (default 2)")
    ap.add_argument("--json", default=None, help="write every row's numbers here")
    args = ap.parse_args(argv)
    import ubatch
    from ubatch.model import fetch
    from ubatch.testing.reference import RefModel
    kvs = [k for k in args.kv.split(",") if k]
    everything = []
    for model in [m for m in args.models.split(",") if m]:
        if model not in fd.MODELS:
            ap.error(f"unknown model {model!r} (choose from {', '.join(fd.MODELS)})")
        path = fetch.path(model)
        um, rm = ubatch.Model.from_gguf(path), RefModel(str(path), cache=True)
        cs = fd.cases(model)
        names = args.cases.split(",") if args.cases else list(cs)
        results = []
        for name in names:
            c = cs[name]
            if args.short and c["kind"] != "short":
                continue
            for kv in kvs:
                if kv not in c["kv"]:
                    continue
                r = measure_case(um, rm, model, name, c, kv, args.ensemble)
                s = summarize([r])
                print(f"{model} {name:14s} {kv} rows {s['rows']:4d} ub {_fmt(s['ub'])} lc {_fmt(s['lc'])} "
                      f"noise {_fmt(s['noise'])} ub<=lc {100 * s['frac_ub_le_lc']:.0f}% argmax ub!=lc {s['flips']} "
                      f"(ref sides ub {s['flips_ref_ub']}, lc {s['flips_ref_lc']}) "
                      f"({r['seconds']:.0f} s)", flush=True)
                results.append(r)
        groups = {}
        for kv in kvs:
            for kind in ("short", "long"):
                sel = [r for r in results if r["kv"] == kv and r["kind"] == kind]
                if sel:
                    groups[f"{kind} prompts, {kv} K/V"] = summarize(sel)
        if results:
            groups["all"] = summarize(results)
        print_table(model, groups)
        everything += results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
