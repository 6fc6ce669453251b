"""Incremental text of one completion: token pieces (bytes) in, text deltas out, with stop strings.

* A delta never cuts a UTF-8 sequence: the bytes of an incomplete trailing sequence are held back until the
  next piece completes it (or shows it invalid: invalid bytes become U+FFFD, as bytes.decode(errors="replace")
  would decode the whole text).
* Stop strings are matched on the text: the text is cut where the first stop string starts and the stop text is
  not returned. While the end of the text could still be the beginning of a stop string, that end is held back
  (so a delta never has to be taken back). Matching is a KMP automaton per stop string: O(new characters) per
  token, however long the stop strings are (a review found the old prefix test quadratic in their length).
"""
from __future__ import annotations

from functools import lru_cache
from typing import List, Optional, Sequence, Tuple


def utf8_complete_len(buf: bytes) -> int:
    """The length of the longest prefix of buf that does not end inside an incomplete (but so far valid)
    UTF-8 sequence: bytes after it might still form a character with bytes to come."""
    n = len(buf)
    for back in range(1, min(4, n) + 1):          # the last lead byte within the last 4 bytes
        b = buf[n - back]
        if b & 0xC0 == 0x80:                      # continuation byte: keep looking for its lead
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        if need > back and b >= 0xC2 and b <= 0xF4:
            return n - back                       # lead byte waiting for more continuation bytes
        return n
    return n


class StopMatcher:
    """The stop strings of a request with their KMP failure tables (shared by the n choices of a request and by
    requests repeating the same stops). A table is extended lazily, only as far as some text has matched its
    stop string, so a long stop string costs nothing up front; matching costs O(new characters) per token
    (amortised), whatever the stops' length."""

    __slots__ = ("stops", "fails", "_k")

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops: List[str] = [s for s in stops if s]
        self.fails: List[List[int]] = [[0] for _ in self.stops]   # fails[j][i]: longest proper border of s[:i+1]
        self._k = [0] * len(self.stops)                          # the table builder's state per stop

    def grow(self, j: int, n: int) -> None:
        """Extends fails[j] to cover the indices < n."""
        s, f, k = self.stops[j], self.fails[j], self._k[j]
        for i in range(len(f), min(n, len(s))):
            c = s[i]
            while k and s[k] != c:
                k = f[k - 1]
            if s[k] == c:
                k += 1
            f.append(k)
        self._k[j] = k


@lru_cache(maxsize=64)
def matcher(stops: Tuple[str, ...]) -> StopMatcher:
    """The (shared, immutable) StopMatcher of a tuple of stop strings: the n choices of a request, and requests
    repeating the same stops, build the tables once."""
    return StopMatcher(stops)


class TextState:
    """The growing text of one completion (see the module docstring). Appending costs O(new characters + held-back
    characters): the handed-out text is kept as a list of its deltas (joined only when someone reads .text or
    emitted_text), the held-back end as one short string."""

    __slots__ = ("stops", "max_stop", "_matcher", "_state", "_pending", "_done", "_tail", "_n", "emitted", "stopped")

    def __init__(self, stops: "Optional[Sequence[str] | StopMatcher]" = None) -> None:
        m = stops if isinstance(stops, StopMatcher) else matcher(tuple(stops or ()))
        self._matcher = m
        self.stops: List[str] = m.stops
        self.max_stop = max((len(s) for s in self.stops), default=0)
        self._state = [0] * len(self.stops)   # per stop: length of its longest prefix the text ends with
        self._pending = b""        # bytes not decoded yet (an incomplete UTF-8 tail)
        self._done: List[str] = []  # text[:emitted] as the deltas handed out (collapsed to one string when read)
        self._tail = ""            # text[emitted:]: decoded, held back
        self._n = 0                # len(text)
        self.emitted = 0           # characters of text already handed out as deltas
        self.stopped = False       # a stop string was found (text is final)

    def emitted_text(self, n: Optional[int] = None) -> str:
        """text[:n] for n <= emitted (default: emitted), the text already handed out; it never changes later."""
        d = self._done
        if len(d) != 1:
            d[:] = ["".join(d)]
        t = d[0]
        return t if n is None or n >= len(t) else t[:n]

    @property
    def text(self) -> str:
        """The decoded text (with a possible stop string cut off once found)."""
        return self.emitted_text() + self._tail

    def _holdback(self) -> int:
        """Characters at the end of text that are a proper prefix of some stop string."""
        return max(self._state, default=0)

    def _scan(self, new: str, start: int) -> int:
        """Advances every stop's KMP state over `new` (the text from index `start`); returns where the first
        stop string found starts (the earliest start among the stops' first occurrences), or -1."""
        best = -1
        m = self._matcher
        for j, s in enumerate(m.stops):
            f, k, n = m.fails[j], self._state[j], len(s)
            for i, c in enumerate(new):
                while k and s[k] != c:
                    k = f[k - 1]
                if s[k] == c:
                    k += 1
                    if k > len(f):
                        m.grow(j, k)
                if k == n:
                    at = start + i - n + 1
                    if best < 0 or at < best:
                        best = at
                    break
            self._state[j] = k
        return best

    def add(self, piece: bytes, final: bool = False) -> str:
        """Appends a token's bytes; returns the new text that is safe to hand out. final=True flushes the
        held-back bytes and characters (the completion ends)."""
        if self.stopped:
            return ""
        buf = self._pending + piece
        cut = len(buf) if final else utf8_complete_len(buf)
        start = self._n
        new = buf[:cut].decode("utf-8", errors="replace") if cut else ""
        self._tail += new
        self._n += len(new)
        self._pending = buf[cut:]
        if self.stops and new:
            at = self._scan(new, start)
            if at >= 0:
                if at >= self.emitted:            # always: a stop's start is never handed out (held back)
                    self._tail = self._tail[:at - self.emitted]
                else:
                    self._done, self._tail = [self.text[:at]], ""
                self._n = at
                self.stopped = True
                final = True
        end = self._n if final else self._n - self._holdback()
        if end <= self.emitted:
            return ""
        k = end - self.emitted
        delta, self._tail = self._tail[:k], self._tail[k:]
        self._done.append(delta)
        self.emitted = end
        return delta

    def finish(self) -> str:
        """Flushes everything held back (the completion ended for another reason than a stop string)."""
        return self.add(b"", final=True)


__all__ = ["StopMatcher", "TextState", "utf8_complete_len"]
