"""A readable pure-Python reference of llama.cpp's batch allocator (`llama_batch_allocr`).

It follows `docs/llama-cpp-behaviours.md` part B step by step (section numbers in the comments): init (§B3: V1-V3, F1-F4,
S1-S3, C1-C3, Appendix A's content-type rule), split_simple (§B4.2), split_equal (§B4.3), split_seq
(§B4.4) and ubatch_add (§B4.5). It is the second oracle for the tests and the baseline for the
benchmarks; it favours clarity over speed (plain Python lists and sets, one loop per rule).

The project's deliberate differences from llama.cpp are implemented here exactly as in the C core:
  * a row's seq ids are an ascending set (duplicates collapse, so {0, 0} is not "coupled");
  * a row's primary seq (llama.cpp's `seq_id[i][0]`) is its smallest id: it picks the automatic
    position (only the primary seq advances), drives the sequential split's consecutive-id rule and
    is the first member of every coupling pair;
  * `split_equal(strict=True)` stops choosing sequence sets at n_ubatch, so a ubatch never holds more
    than n_ubatch tokens; `strict=False` keeps llama.cpp's n_ubatch + 1 overflow;
  * what llama.cpp aborts on (empty batch, n_keep_tail >= n_ubatch, out-of-bounds M-RoPE reads) raises.

Error messages are llama.cpp's text without the "init: " prefix and the trailing newline. A memory is
read only through seq_pos_min(s)/seq_pos_max(s) for every s < n_seq_max (the reference ignores the
native fast path `seq_pos_bounds`); values must be ints in [-1, INT32_MAX].
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ubatch.batch.container import KIND_EMBD, KIND_TOKEN, Batch
from ubatch.common.errors import BatchError, CallOrderError, SplitError

from ubatch.common.limits import LLAMA_MAX_SEQ
from ubatch.common.validate import I32_MAX as _I32_MAX, I32_MIN as _I32_MIN

MSG_SEQUENTIAL_COUPLED = ("sequential split is not supported when there are coupled sequences in the "
                          "input batch (you may need to use the -kvu flag)")


def _check_count(name: str, v: Any, lo: int) -> int:
    """An int argument >= lo (TypeError / ValueError otherwise)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return v


def _bound_int(name: str, s: int, v: Any) -> int:
    """One position bound reported by a memory: an int (a Python bool counts as 0 / 1, as in Python) in
    [-1, INT32_MAX] (-1 = empty)."""
    if isinstance(v, np.bool_) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}({s}) returned {type(v).__name__}, expected an int")
    if not -1 <= int(v) <= _I32_MAX:
        raise ValueError(f"{name}({s}) = {int(v)} is outside [-1, {_I32_MAX}]")
    return int(v)


class RefUBatch:
    """One micro-batch (llama_ubatch) with the same attribute names as `ubatch.UBatch`."""

    def __init__(self, *, n_tokens: int, n_seq_tokens: int, n_seqs: int, n_seqs_unq: int, n_pos: int,
                 equal_seqs: bool, token: Optional[np.ndarray], embd: Optional[np.ndarray], pos: np.ndarray,
                 output: np.ndarray, seq_rows: List[List[int]], seq_id_unq: np.ndarray, seq_idx: np.ndarray,
                 batch_idxs: np.ndarray) -> None:
        self.n_tokens = n_tokens
        self.n_seq_tokens = n_seq_tokens
        self.n_seqs = n_seqs
        self.n_seqs_unq = n_seqs_unq
        self.n_pos = n_pos
        self.equal_seqs = equal_seqs
        self.token = token
        self.embd = embd
        self.pos = pos
        self.output = output
        self._seq_rows = seq_rows
        self.n_seq_id = np.array([len(r) for r in seq_rows], dtype=np.int32)
        self.seq_id_unq = seq_id_unq
        self.seq_idx = seq_idx
        self.batch_idxs = batch_idxs

    def seq_ids(self, r: int) -> np.ndarray:
        """The ascending seq ids of ubatch row r."""
        if not 0 <= r < self.n_tokens:
            raise IndexError(f"row {r} out of range [0, {self.n_tokens})")
        return np.array(self._seq_rows[r], dtype=np.int32)

    def __repr__(self) -> str:
        return (f"RefUBatch(n_tokens={self.n_tokens}, n_seq_tokens={self.n_seq_tokens}, n_seqs={self.n_seqs}, "
                f"n_seqs_unq={self.n_seqs_unq}, equal_seqs={self.equal_seqs})")


class _State:
    """Everything init produces (committed to the allocator only when every check passed)."""

    n_tokens: int
    n_seq_max: int
    has_token: bool
    has_embd: bool
    token: Optional[np.ndarray]        # int32[n]
    embd: Optional[np.ndarray]         # float32[n, n_embd]
    pos: np.ndarray                    # int32[n_pos, n], section-major (token batches: broadcast section 0)
    seq_rows: List[List[int]]          # row i's ids, ascending and distinct; seq_rows[i][0] = primary
    seq_sets: List[frozenset]          # the same as sets (llama.cpp's bitset seq_set[i])
    seq_set_map: dict                  # frozenset -> ascending list of rows whose set is exactly that set
    output: np.ndarray                 # int8[n] after F4
    n_outputs: int
    seq_pos: dict                      # seq -> set of distinct positions (section 0)
    coupled: set                       # pairs (primary, other)
    seq_id_unq: List[int]
    warning: str


class ReferenceAllocator:
    """Pure-Python `BatchAllocator`: same public surface, same results, same errors."""

    def __init__(self, n_pos_per_embd: int = 1) -> None:
        n_pos_per_embd = _check_count("n_pos_per_embd", n_pos_per_embd, 1)
        if n_pos_per_embd not in (1, 3, 4):
            raise ValueError(f"n_pos_per_embd must be 1, 3 or 4, got {n_pos_per_embd}")
        self.n_pos_per_embd = n_pos_per_embd
        self._st: Optional[_State] = None
        self._used: List[bool] = []
        self._n_used = 0
        self._out_ids: List[int] = []
        self.warning: str = ""     # the warning of the last successful init ("" if none)

    # ================================================================== init (§B3)
    def init(self, batch: Batch, *, n_seq_max: int, n_vocab: Optional[int] = None, output_all: bool = False,
             memory: Any = None) -> None:
        """Validates and normalises `batch` (llama_batch_allocr::init), then split_reset().

        Raises BatchError naming the culprit; on failure the allocator keeps its previous state."""
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a ubatch.Batch, got {type(batch).__name__}")
        if isinstance(n_seq_max, (bool, np.bool_)) or not isinstance(n_seq_max, (int, np.integer)):
            raise TypeError(f"n_seq_max must be an int, got {type(n_seq_max).__name__}")
        if n_vocab is not None:
            if isinstance(n_vocab, (bool, np.bool_)) or not isinstance(n_vocab, (int, np.integer)):
                raise TypeError(f"n_vocab must be an int or None, got {type(n_vocab).__name__}")
            if not 0 <= n_vocab <= _I32_MAX:
                raise ValueError(f"n_vocab must be in [0, {_I32_MAX}] (or None: no check), got {n_vocab}")
        st = self._build_state(batch, int(n_seq_max), None if n_vocab is None else int(n_vocab),
                               bool(output_all), memory)
        self._st = st              # commit: nothing above touched self
        self.warning = st.warning
        self.split_reset()

    def _build_state(self, batch: Batch, n_seq_max: int, n_vocab: Optional[int], output_all: bool,
                     memory: Any) -> _State:
        n = batch.n_tokens
        n_pos = self.n_pos_per_embd
        # llama.cpp: GGML_ASSERT(n_tokens > 0) -- an abort; here an error.
        if n <= 0:
            raise BatchError("n_tokens == 0: the batch is empty")
        # the memory's per-seq ranges (-1 = empty), read once and checked, as llama.cpp asks for them:
        # seq_pos_max of the sequences in the batch (of all of them for automatic positions), seq_pos_min of
        # the coupled ones only (the coupled-sequence check is the only reader)
        mem_min = mem_max = None
        if memory is not None and 1 <= n_seq_max <= LLAMA_MAX_SEQ:
            rows = [set(batch.seq_ids(i)) for i in range(n)]
            present = sorted({s for ids in rows for s in ids if 0 <= s < n_seq_max})
            coupled = sorted({s for ids in rows if len(ids) > 1 for s in ids if 0 <= s < n_seq_max})
            mem_min, mem_max = [-1] * n_seq_max, [-1] * n_seq_max
            for s in (range(n_seq_max) if batch._pos is None else present):
                mem_max[s] = _bound_int("memory.seq_pos_max", s, memory.seq_pos_max(s))
            for s in coupled:
                mem_min[s] = _bound_int("memory.seq_pos_min", s, memory.seq_pos_min(s))
        if not _I32_MIN <= n_seq_max <= _I32_MAX:
            raise BatchError(f"n_seq_max = {n_seq_max} is outside [1, {LLAMA_MAX_SEQ}]")
        # V1
        if n_seq_max > LLAMA_MAX_SEQ:
            raise BatchError(f"n_seq_max = {n_seq_max} > {LLAMA_MAX_SEQ}")
        if n_seq_max < 1:
            raise BatchError(f"n_seq_max = {n_seq_max} < 1")

        # Appendix A, step 1: every row must have the same content types as row 0.
        has_token, has_embd = self._content_types(batch, n)
        if not has_token:   # embedding positions are read section by section (§B3.6)
            if batch._pos is not None and batch.n_pos_per_embd != n_pos:
                raise BatchError(f"embedding batch has {batch.n_pos_per_embd} position section(s) per row, "
                                 f"the allocator needs n_pos_per_embd = {n_pos}")
            if batch._pos is None and n_pos > 1:
                # llama.cpp reads pos[j*n_tokens + i] for j up to n_pos-1 out of bounds here (Appendix B.6).
                raise BatchError(f"an embedding batch for a model with {n_pos} position sections needs explicit "
                                 f"positions (automatic positions only fill one section)")
        token = np.array(batch._token[:n], dtype=np.int32) if has_token else None
        embd = np.array(batch._embd[:n], dtype=np.float32) if has_embd else None

        # V2: token ids in [0, n_vocab)
        if token is not None and n_vocab is not None:
            for i in range(n):
                t = int(token[i])
                if t < 0 or t >= n_vocab:
                    raise BatchError(f"invalid token[{i}] = {t}")

        # seq ids of every row as an ascending set (F2: absent -> every row is {0})
        seq_rows: List[List[int]] = []
        for i in range(n):
            if batch._seq_off is None:
                ids = [0]
            else:
                ids = sorted(set(int(x) for x in batch._seq_id[batch._seq_off[i]: batch._seq_off[i + 1]]))
                if not ids:
                    raise BatchError(f"row {i} has no sequence id")
            seq_rows.append(ids)
        # V3: every id in [0, n_seq_max)  (llama.cpp prints ">=" for negative ids too)
        if batch._seq_off is not None:
            for i in range(n):
                for k, s in enumerate(seq_rows[i]):
                    if s < 0 or s >= n_seq_max:
                        raise BatchError(f"invalid seq_id[{i}][{k}] = {s} >= {n_seq_max}")

        # F3: positions, given or automatic (§B3.3, compat path: only the primary seq advances)
        pos = np.zeros((n_pos, n), dtype=np.int32)
        if batch._pos is not None:
            if has_token:   # token batch: section 0 is broadcast to every section (§B3.6)
                pos[:, :] = batch._pos[0, :n][None, :]
            else:
                pos[:, :] = batch._pos[:, :n]
        else:
            p_next = {}
            for i in range(n):
                s = seq_rows[i][0]
                if s not in p_next:
                    p_next[s] = mem_max[s] + 1 if mem_max is not None else 0
                p = p_next[s]
                if p > _I32_MAX:
                    raise BatchError(f"automatic position of token {i} (seq {s}) overflows int32")
                pos[:, i] = p
                p_next[s] = p + 1

        # F4: output flags
        warning = ""
        if batch._output is None:
            output = np.zeros(n, dtype=np.int8)
            if output_all:
                output[:] = 1
            else:
                output[n - 1] = 1
        else:
            output = (np.asarray(batch._output[:n]) != 0).astype(np.int8)
            if output_all and not output.all():
                warning = "embeddings required but some input tokens were not marked as outputs -> overriding"
                output[:] = 1

        # S1
        n_outputs = int(output.sum())

        # S2: distinct positions per seq (section 0) and the coupling record
        seq_pos: dict = {}
        coupled: set = set()
        for i in range(n):
            primary = seq_rows[i][0]
            for k, s in enumerate(seq_rows[i]):
                seq_pos.setdefault(s, set()).add(int(pos[0, i]))
                if k > 0:
                    coupled.add((primary, s))

        # S3: seq sets, the set -> rows map, the distinct seqs of the batch
        seq_sets = [frozenset(r) for r in seq_rows]
        seq_set_map: dict = {}
        for i in range(n):
            seq_set_map.setdefault(seq_sets[i], []).append(i)
        seq_id_unq = sorted(seq_pos)

        # C1: positions against memory, per seq in ascending id order
        for s in seq_id_unq:
            y = min(seq_pos[s])
            if n_pos > 1:
                x = mem_max[s] if mem_max is not None else -1
                if has_token and x >= 0 and x >= y:
                    raise BatchError(self._msg_mrope(s, x, y, "X < Y"))
                if not has_token and x >= 0 and x > y:
                    raise BatchError(self._msg_mrope(s, x, y, "X <= Y"))
            else:
                if mem_max is not None:
                    x = mem_max[s]
                    if x >= 0 and y != x + 1:
                        raise BatchError(
                            f"the tokens of sequence {s} in the input batch have inconsistent sequence positions:\n"
                            f" - the last position stored in the memory module of the context (i.e. the KV cache) "
                            f"for sequence {s} is X = {x}\n"
                            f" - the tokens for sequence {s} in the input batch have a starting position of Y = {y}\n"
                            f" it is required that the sequence positions remain consecutive: Y = X + 1")
                if max(seq_pos[s]) - y + 1 > len(seq_pos[s]):
                    raise BatchError(f"sequence {s} positions are not continuous")

        # C2: coupled sequences must have the same range in memory
        if mem_max is not None:
            for s0, s1 in sorted(coupled):
                if mem_min[s0] != mem_min[s1] or mem_max[s0] != mem_max[s1]:
                    raise BatchError(f"sequence {s0} is coupled to {s1} in the input batch, but have divereged")

        # C3: positions must not decrease within a seq (batch order); the "incompatible sequence sets"
        # half of this check can never fire (Appendix B.1) and is therefore omitted.
        cur_pos: dict = {}
        for i in range(n):
            p = int(pos[0, i])
            for s in seq_rows[i]:
                if p < cur_pos.get(s, -1):
                    raise BatchError(f"sequence {s} positions are decreasing (not allowed)")
                cur_pos[s] = p

        st = _State()
        st.n_tokens, st.n_seq_max = n, n_seq_max
        st.has_token, st.has_embd = has_token, has_embd
        st.token, st.embd, st.pos = token, embd, pos
        st.seq_rows, st.seq_sets, st.seq_set_map = seq_rows, seq_sets, seq_set_map
        st.output, st.n_outputs = output, n_outputs
        st.seq_pos, st.coupled, st.seq_id_unq = seq_pos, coupled, seq_id_unq
        st.warning = warning
        return st

    @staticmethod
    def _content_types(batch: Batch, n: int) -> Tuple[bool, bool]:
        """(has token ids, has embeddings) of the batch; every row must match row 0 (Appendix A)."""
        if batch._kind is None:
            has_token, has_embd = batch._token is not None, batch._embd is not None
        else:
            def desc(k: int) -> str:
                return {0: "neither", KIND_TOKEN: "a token id", KIND_EMBD: "an embedding"}.get(k, "both")

            k0 = int(batch._kind[0])
            for i in range(1, n):
                if int(batch._kind[i]) != k0:
                    raise BatchError(f"all entries in the batch must have the same content types (row {i} has "
                                     f"{desc(int(batch._kind[i]))}, row 0 has {desc(k0)})")
            has_token, has_embd = bool(k0 & KIND_TOKEN), bool(k0 & KIND_EMBD)
            has_token = has_token and batch._token is not None
            has_embd = has_embd and batch._embd is not None
        if not has_token and not has_embd:
            raise BatchError("batch has neither token ids nor embeddings")
        return has_token, has_embd

    @staticmethod
    def _msg_mrope(s: int, x: int, y: int, rule: str) -> str:
        return (f"the tokens of sequence {s} in the input batch have inconsistent sequence positions:\n"
                f" - the last position stored in the memory module of the context (i.e. the KV cache) "
                f"for sequence {s} is X = {x}\n"
                f" - the tokens for sequence {s} in the input batch have a starting position of Y = {y}\n"
                f" for M-RoPE, it is required that the position satisfies: {rule}")

    # ================================================================== read access
    def _state(self, what: str = "split") -> _State:
        if self._st is None:
            raise CallOrderError(f"{what} called before a successful init")
        return self._st

    @property
    def n_tokens(self) -> int:
        return 0 if self._st is None else self._st.n_tokens

    @property
    def n_used(self) -> int:
        return self._n_used

    @property
    def n_outputs(self) -> int:
        return 0 if self._st is None else self._st.n_outputs

    @property
    def out_ids(self) -> np.ndarray:
        return np.array(self._out_ids, dtype=np.int32)

    @property
    def pos(self) -> np.ndarray:
        """Normalised positions int32[n_pos, n_tokens] (automatic ones filled in)."""
        if self._st is None:
            return np.zeros((self.n_pos_per_embd, 0), np.int32)
        return self._st.pos.copy()

    @property
    def output(self) -> np.ndarray:
        """Normalised output flags int8[n_tokens] (after the output_all override)."""
        if self._st is None:
            return np.zeros(0, np.int8)
        return self._st.output.copy()

    def seq_ids(self, i: int) -> np.ndarray:
        """The normalised (ascending, distinct) seq ids of batch row i."""
        st = self._state()
        if not 0 <= i < st.n_tokens:
            raise IndexError(f"row {i} out of range [0, {st.n_tokens})")
        return np.array(st.seq_rows[i], dtype=np.int32)

    def seq_pos_range(self, s: int) -> Tuple[int, int]:
        """(min, max) section-0 position of seq s in the batch, (-1, -1) if absent."""
        if self._st is None or s not in self._st.seq_pos:
            return (-1, -1)
        return (min(self._st.seq_pos[s]), max(self._st.seq_pos[s]))

    @property
    def has_coupled(self) -> bool:
        return bool(self._state().coupled)

    # ================================================================== splits (§B4)
    def split_all(self, strategy: str, n_ubatch: int, *, sequential: bool = False, n_keep_tail: int = 0,
                  strict: bool = True) -> List[RefUBatch]:
        """split_reset, then `strategy` ("simple", "equal", "seq") until nothing is left; on failure the
        allocator is left split-reset (as BatchAllocator.split_all)."""
        if strategy not in ("simple", "equal", "seq"):
            raise ValueError(f"strategy must be one of ['equal', 'seq', 'simple'], got {strategy!r}")
        self.split_reset()
        out: List[RefUBatch] = []
        try:
            while True:
                if strategy == "simple":
                    ub = self.split_simple(n_ubatch)
                elif strategy == "seq":
                    ub = self.split_seq(n_ubatch)
                else:
                    ub = self.split_equal(n_ubatch, sequential=sequential, n_keep_tail=n_keep_tail, strict=strict)
                if ub is None:
                    return out
                out.append(ub)
        except BaseException:
            self.split_reset()
            raise

    def split_reset(self) -> None:
        """§B4.1: forget every emitted ubatch."""
        st = self._state("split_reset")
        self._used = [False] * st.n_tokens
        self._n_used = 0
        self._out_ids = []

    def _first_unused(self) -> int:
        for i, u in enumerate(self._used):
            if not u:
                return i
        return -1

    def _use(self, i: int) -> None:
        self._used[i] = True
        self._n_used += 1

    def _unuse(self, i: int) -> None:
        self._used[i] = False
        self._n_used -= 1

    def split_simple(self, n_ubatch: int) -> Optional[RefUBatch]:
        """§B4.2: the next run of up to n_ubatch unused tokens in batch order."""
        n_ubatch = _check_count("n_ubatch", n_ubatch, 1)
        st = self._state()
        c = self._first_unused()
        if c < 0:
            return None
        idxs = []
        while True:
            idxs.append(c)
            self._use(c)
            c += 1
            if c >= st.n_tokens or len(idxs) >= n_ubatch:
                break
        return self._ubatch_add(idxs, n_seqs=len(idxs), equal_seqs=False)

    def split_equal(self, n_ubatch: int, *, sequential: bool = False, n_keep_tail: int = 0,
                    strict: bool = True) -> Optional[RefUBatch]:
        """§B4.3: n_seqs disjoint sequence sets, the same number of tokens from each."""
        n_ubatch = _check_count("n_ubatch", n_ubatch, 1)
        st = self._state()
        if isinstance(n_keep_tail, (bool, np.bool_)) or not isinstance(n_keep_tail, (int, np.integer)):
            raise TypeError(f"n_keep_tail must be an int, got {type(n_keep_tail).__name__}")
        n_keep_tail = int(n_keep_tail)
        if not 0 <= n_keep_tail < n_ubatch:   # llama.cpp: GGML_ASSERT(n_ubatch > n_keep_tail) (an abort)
            raise BatchError(f"n_keep_tail = {n_keep_tail} must be >= 0 and < n_ubatch = {n_ubatch}")
        if sequential and st.coupled:
            raise SplitError(MSG_SEQUENTIAL_COUPLED)

        # phase 1: choose disjoint sets in the order of their first unused token
        sets: List[frozenset] = []
        last = -1
        for i in range(st.n_tokens):
            if self._used[i]:
                continue
            cand = st.seq_sets[i]
            ok = all(cand.isdisjoint(s) for s in sets)
            if sequential:
                ok = ok and (not sets or st.seq_rows[i][0] == last + 1)   # consecutive primary ids only
            if ok:
                sets.append(cand)
                last = st.seq_rows[i][0]
                if strict and len(sets) >= n_ubatch:
                    break
                if len(sets) > n_ubatch:      # llama.cpp: stops only after n_ubatch + 1 sets
                    break
        n = len(sets)
        if n == 0:
            return None

        # phase 2: grow every set in lockstep, in batch order within each set
        rows = [st.seq_set_map[s] for s in sets]
        cur = []
        for k in range(n):
            c = 0
            while self._used[rows[k][c]]:
                c += 1
            cur.append(c)
        per: List[List[int]] = [[] for _ in range(n)]
        while True:
            if any(cur[k] == len(rows[k]) for k in range(n)):
                break
            for k in range(n):
                t = rows[k][cur[k]]
                per[k].append(t)
                self._use(t)
                cur[k] += 1
            if (len(per[0]) + 1) * n > n_ubatch:
                break

        # phase 3: keep the last n_keep_tail tokens of every set together
        if n_keep_tail > 0:
            def rem(k: int) -> int:
                return len(rows[k]) - cur[k]

            keep = 0
            while keep < n and (rem(keep) == 0 or rem(keep) >= n_keep_tail):
                keep += 1
            if keep == 0:
                if len(per[0]) + rem(0) <= n_ubatch:
                    while cur[0] < len(rows[0]):      # take the whole rest of set 0
                        t = rows[0][cur[0]]
                        per[0].append(t)
                        self._use(t)
                        cur[0] += 1
                else:
                    while rem(0) < n_keep_tail:       # leave n_keep_tail tokens for the next ubatch
                        t = per[0].pop()
                        self._unuse(t)
                        cur[0] -= 1
                keep = 1
            for k in range(keep, n):
                for t in per[k]:
                    self._unuse(t)
            n = keep

        idxs = [t for k in range(n) for t in per[k]]
        return self._ubatch_add(idxs, n_seqs=n, equal_seqs=True)

    def split_seq(self, n_ubatch: int) -> Optional[RefUBatch]:
        """§B4.4: one sequence path; the allowed set only shrinks (a shared prefix, then one branch)."""
        n_ubatch = _check_count("n_ubatch", n_ubatch, 1)
        st = self._state()
        c = self._first_unused()
        if c < 0:
            return None
        cur = st.seq_sets[c]
        idxs = []
        while True:
            idxs.append(c)
            self._use(c)
            if len(idxs) >= n_ubatch:
                break
            c += 1
            while c < st.n_tokens and (self._used[c] or not st.seq_sets[c] <= cur):
                c += 1
            if c >= st.n_tokens:
                break
            cur = st.seq_sets[c]
        return self._ubatch_add(idxs, n_seqs=1, equal_seqs=True)

    # ================================================================== ubatch_add (§B4.5)
    def _ubatch_add(self, idxs: Sequence[int], *, n_seqs: int, equal_seqs: bool) -> RefUBatch:
        st = self._st
        n = len(idxs)
        n_pos = self.n_pos_per_embd
        sel = np.array(idxs, dtype=np.int64)
        token = st.token[sel].copy() if st.token is not None else None
        embd = st.embd[sel].copy() if st.embd is not None else None
        pos = np.ascontiguousarray(st.pos[:, sel], dtype=np.int32)
        output = st.output[sel].copy()
        seq_rows = [list(st.seq_rows[b]) for b in idxs]
        present = set()
        for b in idxs:
            present.update(st.seq_rows[b])
            if st.output[b]:
                self._out_ids.append(b)          # emission order = split order
        seq_id_unq = sorted(present)
        seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
        for k, s in enumerate(seq_id_unq):
            seq_idx[s] = k
        for arr in (token, embd, pos, output, seq_idx):
            if arr is not None:
                arr.flags.writeable = False
        return RefUBatch(n_tokens=n, n_seq_tokens=n // n_seqs, n_seqs=n_seqs, n_seqs_unq=len(seq_id_unq),
                         n_pos=n_pos, equal_seqs=equal_seqs, token=token, embd=embd, pos=pos, output=output,
                         seq_rows=seq_rows, seq_id_unq=np.array(seq_id_unq, dtype=np.int32), seq_idx=seq_idx,
                         batch_idxs=np.array(idxs, dtype=np.int32))
