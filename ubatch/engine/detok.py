"""Incremental text of one completion: token pieces (bytes) in, text deltas out, with stop strings.

* A delta never cuts a UTF-8 sequence: the bytes of an incomplete trailing sequence are held back until the
  next piece completes it (or shows it invalid: invalid bytes become U+FFFD, as bytes.decode(errors="replace")
  would decode the whole text).
* Stop strings are matched on the text: the text is cut where the first stop string starts and the stop text is
  not returned. While the end of the text could still be the beginning of a stop string, that end is held back
  (so a delta never has to be taken back).
"""
from __future__ import annotations

from typing import List, Optional, Sequence


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


class TextState:
    """The growing text of one completion (see the module docstring)."""

    __slots__ = ("stops", "max_stop", "_pending", "text", "emitted", "stopped")

    def __init__(self, stops: Optional[Sequence[str]] = None) -> None:
        self.stops: List[str] = [s for s in (stops or []) if s]
        self.max_stop = max((len(s) for s in self.stops), default=0)
        self._pending = b""        # bytes not decoded yet (an incomplete UTF-8 tail)
        self.text = ""             # decoded text (with a possible stop string cut off once found)
        self.emitted = 0           # characters of text already handed out as deltas
        self.stopped = False       # a stop string was found (text is final)

    def _holdback(self) -> int:
        """Characters at the end of text that are a proper prefix of some stop string."""
        t = self.text
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(t)), best, -1):
                if t.endswith(s[:k]):
                    best = k
                    break
        return best

    def add(self, piece: bytes, final: bool = False) -> str:
        """Appends a token's bytes; returns the new text that is safe to hand out. final=True flushes the
        held-back bytes and characters (the completion ends)."""
        if self.stopped:
            return ""
        buf = self._pending + piece
        cut = len(buf) if final else utf8_complete_len(buf)
        start = len(self.text)
        if cut:
            self.text += buf[:cut].decode("utf-8", errors="replace")
        self._pending = buf[cut:]
        if self.stops:
            lo = max(0, start - self.max_stop + 1)
            hits = [i for i in (self.text.find(s, lo) for s in self.stops) if i >= 0]
            if hits:
                self.text = self.text[:min(hits)]
                self.stopped = True
                final = True
        end = len(self.text) if final else len(self.text) - self._holdback()
        if end <= self.emitted:
            return ""
        delta = self.text[self.emitted:end]
        self.emitted = end
        return delta

    def finish(self) -> str:
        """Flushes everything held back (the completion ended for another reason than a stop string)."""
        return self.add(b"", final=True)


__all__ = ["TextState", "utf8_complete_len"]
