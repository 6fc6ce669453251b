"""Stop matching costs O(new text) per token, whatever the stop strings' length (the old
matcher tested every prefix of every stop string per token: quadratic in the stop length). Checked two ways:
the same deltas and final text as a direct (slow) reference on random pieces and stops, and a count of the
character reads the matcher makes per generated character with four 20,000-character stop strings."""
from __future__ import annotations

from hypothesis import given, strategies as st

from ubatch.engine.detok import TextState, utf8_complete_len


def reference(pieces, stops):
    """The specification, directly: after each piece the text is cut at the earliest start of a stop string
    found in it; otherwise everything but the longest end that is a proper prefix of a stop is handed out."""
    stops = [s for s in stops if s]
    pending, text, emitted, out = b"", "", 0, []
    for i, p in enumerate(pieces + [None]):
        final = p is None
        buf = pending + (p or b"")
        cut = len(buf) if final else utf8_complete_len(buf)
        text += buf[:cut].decode("utf-8", errors="replace")
        pending = buf[cut:]
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            text = text[:min(hits)]
            out.append(text[emitted:])
            return out, text, True
        hold = 0 if final else max([k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])], default=0)
        end = len(text) - hold
        out.append(text[emitted:end] if end > emitted else "")
        emitted = max(emitted, end)
    return out, text, False


ALPHA = st.text(alphabet="ab猫\n", min_size=0, max_size=6)


@given(st.lists(ALPHA.map(lambda s: s.encode()), min_size=0, max_size=12), st.lists(ALPHA, min_size=0, max_size=4),
       st.integers(0, 3))
def test_same_as_the_reference(pieces, stops, split):
    if split and pieces:                   # also cut pieces inside a UTF-8 sequence
        joined = b"".join(pieces)
        pieces = [joined[i:i + split] for i in range(0, len(joined), split)]
    ts = TextState(stops)
    deltas, snaps = [], []
    for p in pieces:
        deltas.append(ts.add(p))
        snaps.append((ts.emitted, "".join(deltas)))
        if len(snaps) % 2:                 # the handed-out text read as it grows, and only later
            assert ts.emitted_text() == snaps[-1][1] and ts.emitted_text(ts.emitted) == snaps[-1][1]
    if not ts.stopped:
        deltas.append(ts.finish())
    want, text, stopped = reference(pieces, stops)
    assert ts.text == text and ts.stopped == stopped
    assert "".join(deltas) == text == "".join(want)
    # a snapshot taken earlier (how far text had been handed out) reads the same text now
    assert [ts.emitted_text(n) for n, _ in snaps] == [t for _, t in snaps]


class Counting(str):
    """A stop string that counts how often its characters are read (indexing or slicing)."""
    reads = 0

    def __getitem__(self, k):
        Counting.reads += 1
        return str.__getitem__(self, k)


def test_long_stop_strings_cost_constant_work_per_character():
    # four 20,000-character stops that the text keeps almost matching: "aaaa…ab", "aaaa…ac", ...
    stops = [Counting("a" * 19_999 + end) for end in "bcde"]
    Counting.reads = 0
    ts = TextState(stops)
    assert Counting.reads == 0                          # nothing is paid up front for a long stop string
    pieces = [b"aaa", b"a", b"aa", b"xa"] * 64          # 256 tokens, 448 characters
    for p in pieces:
        ts.add(p)
    n_chars = sum(len(p) for p in pieces)
    # KMP: at most 2 comparisons per character and stop, amortised (plus one read per fall-back), and the
    # lazily built failure tables as far as the text matched
    assert Counting.reads <= 3 * 4 * n_chars, Counting.reads
    assert not ts.stopped
    # the held-back end is the longest run of a's the text ends with
    assert ts.text == "".join(p.decode() for p in pieces) and ts.emitted == len(ts.text) - 1
    ts.add(b"a" * 19_998 + b"d!")
    assert ts.stopped and ts.text.endswith("x")
