"""A direct, slow Python model of llama.cpp's KV sequence operations (docs/llama-cpp-behaviours.md §K5.2, §K5.7), used to check
the C implementation on random operation sequences. Cells per stream: pos (-1 empty), seq set, shift."""
from __future__ import annotations

INF = 2**31 - 1


class RefKV:
    def __init__(self, kv):
        self.n_stream, self.size = kv.n_stream, kv.size
        self.pos = [[-1] * self.size for _ in range(self.n_stream)]
        self.seq = [[set() for _ in range(self.size)] for _ in range(self.n_stream)]
        self.shift = [[0] * self.size for _ in range(self.n_stream)]
        self.head = [kv.head(s) for s in range(self.n_stream)]
        self.has_shift = [kv.has_shift(s) for s in range(self.n_stream)]
        self.copies = []
        for st in range(self.n_stream):
            a = kv.cell_arrays(st)
            for (i, p, sh), ids in zip(zip(a["index"], a["pos"], a["shift"]), [c[2] for c in kv.cells(st)]):
                self.pos[st][i], self.seq[st][i], self.shift[st][i] = int(p), set(ids), int(sh)

    def stream(self, s):
        return 0 if self.n_stream == 1 else s

    def _empty(self, st, i):
        self.pos[st][i], self.seq[st][i], self.shift[st][i] = -1, set(), 0

    @staticmethod
    def _range(p0, p1):
        return (0 if p0 < 0 else p0), (INF if p1 < 0 else p1)

    def seq_rm(self, s, p0, p1):
        p0, p1 = self._range(p0, p1)
        for st in (range(self.n_stream) if s == -1 else [self.stream(s)]):
            new_head = None
            for i in range(self.size):
                if not (p0 <= self.pos[st][i] < p1):
                    continue
                if s == -1:
                    self._empty(st, i)
                elif s in self.seq[st][i]:
                    self.seq[st][i].discard(s)
                    if self.seq[st][i]:
                        continue
                    self._empty(st, i)
                else:
                    continue
                if new_head is None:
                    new_head = i
            if new_head is not None and new_head < self.head[st]:
                self.head[st] = new_head

    def seq_cp(self, src, dst, p0, p1):
        s0, s1 = self.stream(src), self.stream(dst)
        if s0 == s1:
            if src == dst:
                return
            p0, p1 = self._range(p0, p1)
            for i in range(self.size):
                if p0 <= self.pos[s0][i] < p1 and src in self.seq[s0][i]:
                    self.seq[s0][i].add(dst)
            return
        self.copies.append((s0, s1))
        for i in range(self.size):
            self._empty(s1, i)
        self.has_shift[s1] = False
        for i in range(self.size):
            if src in self.seq[s0][i]:
                self.pos[s1][i] = self.pos[s0][i]
                self.seq[s1][i] = {dst}
                self.shift[s1][i] = self.shift[s0][i]
                if self.shift[s0][i]:
                    self.has_shift[s1] = True
        self.head[s1] = self.head[s0]

    def seq_keep(self, s):
        st = self.stream(s)
        new_head = None
        for i in range(self.size):
            if s in self.seq[st][i]:
                self.seq[st][i] = {s}
            elif self.seq[st][i]:
                self._empty(st, i)
                if new_head is None:
                    new_head = i
        if new_head is not None and new_head < self.head[st]:
            self.head[st] = new_head

    def seq_add(self, s, p0, p1, d):
        if d == 0:
            return
        p0, p1 = self._range(p0, p1)
        if p0 == p1:
            return
        st = self.stream(s)
        new_head = None
        for i in range(self.size):
            if p0 <= self.pos[st][i] < p1 and s in self.seq[st][i]:
                self.has_shift[st] = True
                self.pos[st][i] += d
                self.shift[st][i] += d
                if self.pos[st][i] < 0:
                    self._empty(st, i)
                    if new_head is None:
                        new_head = i
        self.head[st] = new_head if new_head is not None else 0

    def seq_div(self, s, p0, p1, d):
        if d == 1:
            return
        p0, p1 = self._range(p0, p1)
        if p0 == p1:
            return
        st = self.stream(s)
        for i in range(self.size):
            if p0 <= self.pos[st][i] < p1 and s in self.seq[st][i]:
                self.has_shift[st] = True
                old = self.pos[st][i]
                self.pos[st][i] = old // d
                self.shift[st][i] += old - old // d

    def state(self):
        cells = [[(i, self.pos[st][i], tuple(sorted(self.seq[st][i]))) for i in range(self.size) if self.pos[st][i] >= 0]
                 for st in range(self.n_stream)]
        shifts = [[self.shift[st][i] for i in range(self.size) if self.pos[st][i] >= 0] for st in range(self.n_stream)]
        return cells, shifts, list(self.head), [bool(h) for h in self.has_shift]

    def bounds(self, s):
        st = self.stream(s)
        ps = [self.pos[st][i] for i in range(self.size) if s in self.seq[st][i]]
        return (min(ps), max(ps)) if ps else (-1, -1)


def c_state(kv):
    cells = [kv.cells(st) for st in range(kv.n_stream)]
    shifts = [kv.cell_arrays(st)["shift"].tolist() for st in range(kv.n_stream)]
    return cells, shifts, [kv.head(s) for s in range(kv.n_stream)], [kv.has_shift(s) for s in range(kv.n_stream)]
