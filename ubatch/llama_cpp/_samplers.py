"""The samplers of llama.cpp's llama-sampling.cpp with its semantics, re-written over numpy views of a
llama_token_data_array (the caller's own memory when they pass one): each sampler transforms the candidates in
place (reorder, shrink `size`, set `selected` / `sorted`), whole-array operations in numpy, the vocabulary-wide
float/double accumulations in C (csrc/compat/sampling.c). Ties between equal logits are ordered by token
position (a stable sort); llama.cpp's std::partial_sort leaves their order unspecified."""
from __future__ import annotations

import ctypes
import math
from typing import Dict, List, Optional

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.llama_cpp._rng import MT19937, rng_seed
from ubatch.llama_cpp._structs import llama_token_data, llama_token_data_array

TD = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert TD.itemsize == ctypes.sizeof(llama_token_data)
_NEG_INF = np.float32(-np.inf)


class Cur:
    """A llama_token_data_array seen from numpy: `a` is data[:size] (a view of the caller's memory)."""

    def __init__(self, s: llama_token_data_array) -> None:
        self.s = s

    @property
    def addr(self) -> int:
        return ctypes.cast(self.s.data, ctypes.c_void_p).value or 0

    @property
    def size(self) -> int:
        return int(self.s.size)

    @size.setter
    def size(self, n: int) -> None:
        self.s.size = int(n)

    @property
    def sorted(self) -> bool:
        return bool(self.s.sorted)

    @sorted.setter
    def sorted(self, v: bool) -> None:
        self.s.sorted = bool(v)

    @property
    def selected(self) -> int:
        return int(self.s.selected)

    @selected.setter
    def selected(self, v: int) -> None:
        self.s.selected = int(v)

    @property
    def a(self) -> np.ndarray:
        n = self.size
        if n == 0 or not self.addr:
            return np.zeros(0, TD)
        return np.frombuffer((ctypes.c_char * (n * TD.itemsize)).from_address(self.addr), TD)

    def cdata(self):
        return ffi.cast("ub_token_data *", self.addr)

    def shift(self, k: int) -> None:
        """data += k; size -= k (xtc)."""
        self.s.data = ctypes.cast(self.addr + k * TD.itemsize, ctypes.POINTER(llama_token_data))
        self.s.size = self.size - k


def _order_desc(logit: np.ndarray, k: Optional[int] = None) -> np.ndarray:
    """Indices of the k largest logits, descending, ties by position."""
    n = logit.shape[0]
    if k is None or k >= n:
        return np.argsort(-logit, kind="stable")
    part = np.argpartition(-logit, k - 1)[:k]
    return part[np.lexsort((part, -logit[part]))]


def top_desc(logit: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits (no NaN; k < len), descending, ties by position: exactly the first k of
    np.argsort(-logit, kind="stable"), found in O(n) (argpartition gives the k-th value; of the tokens at that
    value, the lowest positions fill the last places)."""
    part = np.argpartition(-logit, k - 1)[:k]
    kth = logit[part].min()
    above = np.flatnonzero(logit > kth)
    sel = np.concatenate([above, np.flatnonzero(logit == kth)[:k - len(above)]])
    return sel[np.lexsort((sel, -logit[sel]))]


def partial_sort(cur: Cur, k: int) -> None:
    """llama_token_data_array_partial_sort_inplace: data[:k] = the top k, descending; size = k; sorted."""
    a = cur.a
    order = _order_desc(a["logit"], k)
    a[:len(order)] = a[order].copy()
    cur.size = len(order)
    cur.sorted = True


def softmax(cur: Cur, do_sort: bool) -> None:
    """llama_sampler_softmax_impl."""
    if do_sort and not cur.sorted:
        partial_sort(cur, cur.size)
    lib.ub_compat_softmax(cur.cdata(), cur.size, cur.sorted)


def _f32(x: float) -> np.float32:
    return np.float32(x)


class Sampler:
    name = "?"

    def apply(self, cur: Cur) -> None:
        raise NotImplementedError

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        pass

    def clone(self) -> "Sampler":
        import copy
        return copy.deepcopy(self)

    def seed(self) -> int:
        return 0xFFFFFFFF


class Greedy(Sampler):
    name = "greedy"

    def apply(self, cur: Cur) -> None:
        a = cur.a
        cur.selected = int(np.argmax(a["logit"])) if len(a) else 0


class Dist(Sampler):
    name = "dist"

    def __init__(self, seed: int) -> None:
        self.seed_req = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed_req)
        self.rng = MT19937(self.seed_cur)

    def apply(self, cur: Cur) -> None:
        if cur.size == 0:
            cur.selected = -1
            return
        if cur.size == 1:
            cur.selected = 0
            cur.a["p"][0] = 1.0
            return
        rnd = self.rng.uniform_double()
        cur.selected = int(lib.ub_compat_dist(cur.cdata(), cur.size, cur.sorted, rnd))

    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed_req)
        self.rng.seed(self.seed_cur)

    def seed(self) -> int:
        return self.seed_cur


class TopK(Sampler):
    name = "top-k"

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def apply(self, cur: Cur) -> None:
        top_k(cur, self.k)


def top_k(cur: Cur, k: int) -> None:
    if k <= 0:
        return
    k = min(k, cur.size)
    if not cur.sorted:
        partial_sort(cur, k)
    cur.size = k


class TopP(Sampler):
    name = "top-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = _f32(p), int(min_keep)

    def apply(self, cur: Cur) -> None:
        if self.p >= 1.0 or cur.size == 0:
            return
        softmax(cur, False)
        if not cur.sorted and self._cut_in_head(cur):
            return
        if not cur.sorted:
            partial_sort(cur, cur.size)
        a = cur.a
        cum = np.cumsum(a["p"], dtype=np.float32)
        ok = (cum >= self.p) & (np.arange(1, len(a) + 1) >= self.min_keep)
        hits = np.flatnonzero(ok)
        cur.size = int(hits[0]) + 1 if len(hits) else len(a)
        cur.sorted = True

    def _cut_in_head(self, cur: Cur) -> bool:
        """The cut found among the k best candidates (k = 256, 2048, ... while k < size / 4) without sorting
        the rest: the same kept prefix, in the same order (descending logit, ties by position), as the full
        sort's (np.cumsum is sequential, so the head's running sums are the full sort's first k). False (cur
        unchanged) when the cut lies beyond, the array is small or a logit is NaN: the caller sorts it all."""
        a = cur.a
        n = len(a)
        lg = a["logit"]
        if n <= 1024 or np.isnan(lg).any():
            return False
        k = 256
        while 4 * k < n:
            order = top_desc(lg, k)
            cum = np.cumsum(a["p"][order], dtype=np.float32)
            ok = (cum >= self.p) & (np.arange(1, k + 1) >= self.min_keep)
            hits = np.flatnonzero(ok)
            if len(hits):
                m = int(hits[0]) + 1
                a[:m] = a[order[:m]].copy()
                cur.size = m
                cur.sorted = True
                return True
            k *= 8
        return False


class MinP(Sampler):
    name = "min-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = _f32(p), int(min_keep)

    def apply(self, cur: Cur) -> None:
        if self.p <= 0.0 or cur.size == 0:
            return
        logf_p = _f32(math.log(float(self.p)))
        if not cur.sorted:
            a = cur.a
            lg = a["logit"]
            min_logit = _f32(lg.max()) + logf_p
            keep = np.flatnonzero(lg >= min_logit)
            if len(keep) and len(keep) >= self.min_keep:
                a[:len(keep)] = a[keep].copy()
                cur.size = len(keep)
                return
            partial_sort(cur, cur.size)
        a = cur.a
        lg = a["logit"]
        min_logit = _f32(lg[0]) + logf_p
        idx = np.arange(len(a))
        stop = np.flatnonzero((lg < min_logit) & (idx >= self.min_keep) & (idx >= 1))
        cur.size = int(stop[0]) if len(stop) else len(a)


class Typical(Sampler):
    name = "typical"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = _f32(p), int(min_keep)

    def apply(self, cur: Cur) -> None:
        if self.p >= 1.0 or cur.size == 0:
            return
        softmax(cur, True)
        a = cur.a
        p = a["p"]
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(p)
            terms = np.where(p > 0, -p * logp, np.float32(0) * logp)
        entropy = np.cumsum(terms.astype(np.float32), dtype=np.float32)[-1]
        shifted = np.abs(-logp - entropy).astype(np.float32)
        order = np.argsort(shifted, kind="stable")
        cum = np.cumsum(p[order], dtype=np.float32)
        i = np.arange(len(order))
        ok = (cum > self.p) & ((self.min_keep == 0) | (i >= self.min_keep - 1))
        hits = np.flatnonzero(ok)
        last = int(hits[0]) + 1 if len(hits) else len(order)
        a[:last] = a[order[:last]].copy()
        cur.size = last
        cur.sorted = False


class Temp(Sampler):
    name = "temp"

    def __init__(self, t: float) -> None:
        self.t = _f32(t)

    def apply(self, cur: Cur) -> None:
        temp_impl(cur, self.t)


def temp_impl(cur: Cur, t: np.float32) -> None:
    a = cur.a
    if len(a) == 0:
        return
    lg = a["logit"]
    if t <= 0:
        m = int(np.argmax(lg))
        keep = lg[m]
        lg[:] = _NEG_INF
        lg[m] = keep
        return
    lg /= t


class TempExt(Sampler):
    name = "temp-ext"

    def __init__(self, t: float, delta: float, exponent: float) -> None:
        self.t, self.delta, self.exponent = _f32(t), _f32(delta), _f32(exponent)

    def apply(self, cur: Cur) -> None:
        if self.delta <= 0:
            temp_impl(cur, self.t)
            return
        if cur.size <= 1:
            return
        lo = max(_f32(0), self.t - self.delta)
        hi = self.t + self.delta
        max_entropy = -_f32(math.log(1.0 / cur.size))
        softmax(cur, True)
        p = cur.a["p"]
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(p > 0, p * np.log(p), np.float32(0))
        entropy = -np.cumsum(terms.astype(np.float32), dtype=np.float32)[-1]
        dyn = lo + (hi - lo) * _f32(math.pow(float(entropy / max_entropy), float(self.exponent)))
        temp_impl(cur, _f32(dyn))
        a = cur.a
        lg = a["logit"].astype(np.float64)
        e = np.exp(lg - lg[0])
        a["p"] = (e / np.cumsum(e)[-1]).astype(np.float32)


class Penalties(Sampler):
    name = "penalties"

    def __init__(self, last_n: int, repeat: float, freq: float, present: float) -> None:
        self.last_n = max(int(last_n), 0)
        self.repeat, self.freq, self.present = _f32(repeat), _f32(freq), _f32(present)
        self.prev: List[int] = []
        self.count: Dict[int, int] = {}

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        self.count[token] = self.count.get(token, 0) + 1
        if len(self.prev) >= self.last_n:
            old = self.prev.pop(0)
            self.count[old] -= 1
            if self.count[old] == 0:
                del self.count[old]
        self.prev.append(token)

    def apply(self, cur: Cur) -> None:
        if self.last_n == 0 or (self.repeat == 1.0 and self.freq == 0.0 and self.present == 0.0):
            return
        if not self.count:
            cur.sorted = False
            return
        a = cur.a
        toks = np.fromiter(self.count.keys(), np.int64, len(self.count))
        cnts = np.fromiter(self.count.values(), np.int64, len(self.count))
        order = np.argsort(toks)
        toks, cnts = toks[order], cnts[order]
        ids = a["id"].astype(np.int64)
        pos = np.clip(np.searchsorted(toks, ids), 0, len(toks) - 1)
        hit = np.flatnonzero(toks[pos] == ids)
        if len(hit):
            lg = a["logit"]
            sel = lg[hit]
            sel = np.where(sel <= 0, sel * self.repeat, sel / self.repeat).astype(np.float32)
            c = cnts[pos[hit]].astype(np.float32)
            sel = sel - (c * self.freq + np.float32(1.0) * self.present).astype(np.float32)
            lg[hit] = sel
        cur.sorted = False

    def reset(self) -> None:
        self.prev, self.count = [], {}


class LogitBias(Sampler):
    name = "logit-bias"

    def __init__(self, n_vocab: int, biases: List[tuple]) -> None:
        self.n_vocab = int(n_vocab)
        self.tokens = np.array([t for t, _ in biases], np.int64)
        self.bias = np.array([b for _, b in biases], np.float32)

    def apply(self, cur: Cur) -> None:
        if len(self.tokens) == 0:
            return
        a = cur.a
        lg = a["logit"]
        if cur.size == self.n_vocab:
            ok = (self.tokens >= 0) & (self.tokens < self.n_vocab)
            np.add.at(lg, self.tokens[ok], self.bias[ok])
            return
        for t, b in zip(self.tokens.tolist(), self.bias.tolist()):
            hit = np.flatnonzero(a["id"] == t)
            if len(hit):
                lg[hit[0]] += np.float32(b)


class Xtc(Sampler):
    name = "xtc"

    def __init__(self, p: float, t: float, min_keep: int, seed: int) -> None:
        self.prob, self.threshold, self.min_keep = _f32(p), _f32(t), int(min_keep)
        self.seed_req = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed_req)
        self.rng = MT19937(self.seed_cur)

    def apply(self, cur: Cur) -> None:
        if self.prob <= 0.0 or self.threshold > 0.5 or cur.size < 2:
            return
        chance = self.rng.uniform_float()
        if chance > self.prob:
            return
        softmax(cur, True)
        p = cur.a["p"]
        below = np.flatnonzero(p < self.threshold)
        first_below = int(below[0]) if len(below) else len(p)
        pos_last = max(first_below - 1, 0)
        if cur.size - pos_last >= self.min_keep and pos_last > 0:
            cur.shift(pos_last)

    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed_req)
        self.rng.seed(self.seed_cur)

    def seed(self) -> int:
        return self.seed_cur


class TopNSigma(Sampler):
    name = "top-n-sigma"

    def __init__(self, n: float) -> None:
        self.n = _f32(n)

    def apply(self, cur: Cur) -> None:
        if self.n <= 0.0 or cur.size <= 1:
            return
        lg = cur.a["logit"]
        valid = lg != _NEG_INF
        if valid.any():
            mx = max(_f32(lg[0]), _f32(lg[valid].max()))
            mean = np.float32(np.cumsum(lg[valid], dtype=np.float32)[-1] / np.float32(valid.sum()))
            acc = np.cumsum(((lg[valid] - mean).astype(np.float64) ** 2).astype(np.float32), dtype=np.float32)[-1]
            std = np.float32(math.sqrt(float(acc / np.float32(valid.sum()))))
        else:
            mx, std = _f32(lg[0]), np.float32(0)
        lg[lg < mx - self.n * std] = _NEG_INF
        softmax(cur, False)


class Mirostat(Sampler):
    name = "mirostat"

    def __init__(self, n_vocab: int, seed: int, tau: float, eta: float, m: int) -> None:
        self.n_vocab, self.tau, self.eta, self.m = int(n_vocab), _f32(tau), _f32(eta), int(m)
        self.seed_req = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed_req)
        self.rng = MT19937(self.seed_cur)
        self.mu = _f32(2.0) * self.tau

    def apply(self, cur: Cur) -> None:
        softmax(cur, True)
        p = cur.a["p"]
        sum_tb = sum_t2 = np.float32(0)
        for i in range(min(self.m - 1, cur.size - 1)):       # m is small (100): not a vocabulary loop
            t_i = _f32(math.log((i + 2) / (i + 1)))
            b_i = _f32(math.log(float(p[i] / p[i + 1])))
            sum_tb += t_i * b_i
            sum_t2 += t_i * t_i
        s_hat = sum_tb / sum_t2
        eps = s_hat - 1
        k = _f32(math.pow(float(eps * _f32(2.0 ** float(self.mu))) / (1 - math.pow(self.n_vocab, -float(eps))),
                          1 / float(s_hat)))
        top_k(cur, max(int(k), 1))
        softmax(cur, True)
        idx = self.rng.discrete(cur.a["p"])
        cur.selected = idx
        surprise = -_f32(math.log2(float(cur.a["p"][idx])))
        self.mu = self.mu - self.eta * (surprise - self.tau)

    def reset(self) -> None:
        self.mu = _f32(2.0) * self.tau
        self.seed_cur = rng_seed(self.seed_req)
        self.rng.seed(self.seed_cur)

    def seed(self) -> int:
        return self.seed_cur


class MirostatV2(Mirostat):
    name = "mirostat-v2"

    def __init__(self, seed: int, tau: float, eta: float) -> None:
        super().__init__(0, seed, tau, eta, 0)

    def apply(self, cur: Cur) -> None:
        softmax(cur, True)
        p = cur.a["p"]
        with np.errstate(divide="ignore"):
            over = np.flatnonzero(-np.log2(p) > self.mu)
        cur.size = max(int(over[0]) if len(over) else len(p), 1)
        softmax(cur, True)
        idx = self.rng.discrete(cur.a["p"])
        cur.selected = idx
        surprise = -_f32(math.log2(float(cur.a["p"][idx])))
        self.mu = self.mu - self.eta * (surprise - self.tau)


class Chain(Sampler):
    name = "chain"

    def __init__(self, no_perf: bool) -> None:
        self.no_perf = bool(no_perf)
        self.samplers: list = []           # handles (ints) of the owned samplers
        self.t_sample_ms = 0.0
        self.n_sample = 0


_FLOAT_MAX_LOG = np.float32(88.7228391)
_MAX_CHAR_LEN, _MAX_SEQ_LEN = 40, 20


def dry_breakers(vocab, breakers: List[bytes]) -> Dict[int, List[tuple]]:
    """get_overlapping_token_sequences for every breaker: head token -> the token tails that complete the
    breaker after it (an empty tail: the token contains the whole breaker). Runs once per sampler."""
    out: Dict[int, List[tuple]] = {}
    if vocab is None or vocab.tok is None or not breakers:
        return out
    pieces = getattr(vocab, "_dry_pieces", None)
    if pieces is None:
        pieces = [vocab.piece(t, 0, True) for t in range(vocab.n_tokens)]
        vocab._dry_pieces = pieces
    for br in breakers:
        if not br:
            continue
        br = br[:_MAX_CHAR_LEN]
        first = br[:1]
        for tid, word in enumerate(pieces):
            if br in word:
                out.setdefault(tid, [])
                if () not in out[tid]:
                    out[tid].append(())
                continue
            pos = word.find(first)
            while pos != -1:
                i = 1
                while i < len(br) and pos + i < len(word) and word[pos + i] == br[i]:
                    i += 1
                if i == len(br) or pos + i == len(word):
                    tail = tuple(vocab.encode(br[i:], False, False)[:_MAX_SEQ_LEN])
                    lst = out.setdefault(tid, [])
                    if tail not in lst:
                        lst.append(tail)
                pos = word.find(first, pos + 1)
    return out


class Dry(Sampler):
    """DRY (repetition of sequences): a penalty multiplier * base^(len - allowed_length) on each token that would
    extend a repeat of the recent suffix at least allowed_length long; sequence breakers cut the search."""
    name = "dry"

    def __init__(self, vocab, multiplier: float, base: float, allowed_length: int, penalty_last_n: int,
                 breakers: List[bytes]) -> None:
        self.multiplier, self.base = _f32(multiplier), _f32(base)
        self.allowed, self.last_n = int(allowed_length), int(penalty_last_n)
        # 0.3.36 (7 arguments, no context size): penalty_last_n = -1 leaves the sampler without effect
        self.enabled = self.multiplier != 0.0 and self.base >= 1.0 and self.last_n > 0
        self.breakers = dry_breakers(vocab, breakers) if self.enabled else {}
        self.tokens: List[int] = []

    def accept(self, token: int) -> None:
        if not self.enabled:
            return
        self.tokens.append(int(token))
        if len(self.tokens) > self.last_n:
            del self.tokens[: len(self.tokens) - self.last_n]

    def reset(self) -> None:
        self.tokens = []

    def apply(self, cur: Cur) -> None:
        if not self.enabled:
            return
        n = min(len(self.tokens), self.last_n)
        if n <= self.allowed:
            return
        r = np.array(self.tokens[::-1][:n], np.int32)          # newest first: r[i] = rat(i)
        rep_limit = n
        if self.breakers:
            heads = np.fromiter(self.breakers.keys(), np.int64, len(self.breakers))
            for i in np.flatnonzero(np.isin(r, heads)).tolist():   # only the positions holding a breaker head
                longest = -1
                for tail in self.breakers[int(r[i])]:
                    k = len(tail)
                    if longest < k <= i and all(tail[o] == r[i - o - 1] for o in range(k)):
                        longest = k
                if longest >= 0:
                    rep_limit = i - longest
                    break
        if rep_limit < self.allowed:
            return
        z = np.zeros(n, np.int32)
        lib.ub_compat_z_function(ffi.from_buffer("int32_t[]", r), n, ffi.from_buffer("int32_t[]", z))
        rep = np.minimum(z[1:], rep_limit)                         # k = 1 .. n-1
        nxt = r[:-1]                                               # the token after each repeat: rat(k - 1)
        keep = rep >= self.allowed
        if not keep.any():
            cur.sorted = False
            return
        toks, lens = nxt[keep].astype(np.int64), rep[keep].astype(np.int64)
        order = np.lexsort((-lens, toks))
        toks, lens = toks[order], lens[order]
        first = np.r_[True, toks[1:] != toks[:-1]]
        toks, lens = toks[first], lens[first]                      # the longest repeat each token would extend
        max_exp = 0
        if self.base > 1.000001:
            max_exp = int(_FLOAT_MAX_LOG / np.float32(math.log(float(self.base))))
        a = cur.a
        ids = a["id"].astype(np.int64)
        pos = np.clip(np.searchsorted(toks, ids), 0, len(toks) - 1)
        hit = np.flatnonzero(toks[pos] == ids)
        lg = a["logit"]
        for h in hit.tolist():                                     # the candidates with a repeat (few)
            tid = int(ids[h])
            if () in self.breakers.get(tid, []):
                continue
            e = int(lens[pos[h]]) - self.allowed
            if max_exp > 0 and e > max_exp:
                e = max_exp
            penalty = np.float32(float(self.multiplier) * math.pow(float(self.base), e))   # a float in llama.cpp
            lg[h] = np.float32(lg[h] - penalty)
        cur.sorted = False
