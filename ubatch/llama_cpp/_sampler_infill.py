"""llama.cpp's infill sampler (llama_sampler_init_infill), for fill-in-the-middle: after a softmax, end the
infill (keep only the end-of-generation tokens) when their probability is high enough against the text tokens';
else merge every candidate whose piece is a prefix of another's into the more probable of the two, drop the
text tokens below 0.2, then below 1 / (n_left + 1), renormalising each time (a single EOT when no text token
is left). float32 arithmetic in llama.cpp's order (sequential sums, the merges replayed in its (i0, i1) loop
order). The prefix pairs are found by sorting the pieces (O(n log n)), not by testing all n^2 pairs as llama.cpp
does; the sums and masks are numpy over the candidates."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ubatch.llama_cpp import _samplers as S

_F = np.float32


def _seq_sum(x: np.ndarray) -> np.float32:
    """A float32 sum accumulated left to right, as a C loop adds (numpy's reduce would pair the terms)."""
    return _F(np.cumsum(x, dtype=np.float32)[-1]) if x.shape[0] else _F(0.0)


def _prefix_partners(pieces: List[bytes]) -> Dict[int, List[int]]:
    """i0 -> the ascending candidate indices i1 != i0 whose piece starts with piece i0 (a non-empty piece)."""
    order = sorted(range(len(pieces)), key=lambda i: pieces[i])
    out: Dict[int, List[int]] = {}
    for pos, i0 in enumerate(order):
        p0 = pieces[i0]
        if not p0:
            continue
        ext = []
        for j in order[pos + 1:]:            # the pieces that extend p0 follow it in sorted order
            if not pieces[j].startswith(p0):
                break
            ext.append(j)
        k = pos - 1                          # equal pieces sorted before it are extensions too
        while k >= 0 and pieces[order[k]] == p0:
            ext.append(order[k])
            k -= 1
        if ext:
            out[i0] = sorted(ext)
    return out


class Infill(S.Sampler):
    name = "infill"

    def __init__(self, vocab) -> None:
        self.vocab = vocab
        tok = vocab.tok
        ids = getattr(tok, "eog_ids", ()) if tok is not None else ()
        self.eog = np.array(sorted(ids() if callable(ids) else ids), np.int32)
        self.eot = vocab.special("eot")

    def clone(self) -> "Infill":
        return Infill(self.vocab)

    def apply(self, cur: S.Cur) -> None:
        S.softmax(cur, True)
        a = cur.a
        n = a.shape[0]
        if n == 0:
            return
        is_eog = np.isin(a["id"], self.eog)
        p = a["p"]
        p_eog = _seq_sum(np.where(is_eog, p, _F(0.0)))
        p_txt = _seq_sum(np.where(is_eog, _F(0.0), p))
        if _F(_F(3.0) * p_eog) * _F(n) > p_txt:
            keep = a[is_eog].copy()
            p_sum = _seq_sum(keep["p"])
            keep["p"] = keep["p"] / p_sum
            a[:len(keep)] = keep
            cur.size = len(keep)
            return
        self._combine(a)
        self._threshold(cur, _F(0.2), last=False)

    def _combine(self, a: np.ndarray) -> None:
        pieces = [self.vocab.piece(int(t), 0, False) for t in a["id"]]
        logit, p = a["logit"], a["p"]
        for i0, partners in sorted(_prefix_partners(pieces).items()):
            for i1 in partners:
                if logit[i0] == -np.inf:
                    break
                if logit[i1] == -np.inf:
                    continue
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] = _F(p[dst] + p[src])
                logit[src] = -np.inf
                p[src] = 0.0

    def _threshold(self, cur: S.Cur, thold: np.float32, last: bool) -> None:
        a = cur.a
        is_eog = np.isin(a["id"], self.eog)
        keep_mask = is_eog | (a["p"] >= thold)
        n_non_eog = int(np.count_nonzero(keep_mask & ~is_eog))
        keep = a[keep_mask].copy()
        p_sum = _seq_sum(keep["p"])
        a[:len(keep)] = keep
        cur.size = len(keep)
        if not last and n_non_eog == 0:
            cur.size = 1
            a = cur.a
            a["id"][0] = self.eot
            a["logit"][0] = 1.0
            return
        a = cur.a
        a["p"] = a["p"] / p_sum
        if not last:
            self._threshold(cur, _F(1.0 / (n_non_eog + 1)), last=True)
