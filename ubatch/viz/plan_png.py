"""A picture of one split: the batch in row order on top, then one line per ubatch with its rows in
ubatch order, grouped into its n_seqs sequence sets, padded with empty slots up to n_ubatch; every cell is
coloured by sequence (rows carrying several sequences are striped), outputs are marked, out_ids listed.
With `kv` (ubatch plan --kv) a KV panel follows: each stream's cells as a strip (wrapped), coloured by
sequence, labelled with cell index, position and the ubatch that wrote them; the ubatch rows name their cell."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ubatch.batch.ubatch_view import UBatch

PLOT_HINT = "matplotlib is not installed: cannot draw --png (install it with: pip install 'ubatch[plot]')"


def _colors(n: int):
    import matplotlib.pyplot as plt
    cmap = plt.get_cmap("tab20" if n > 10 else "tab10")
    return [cmap(k % cmap.N) for k in range(max(n, 1))]


def _cell(ax, x: float, y: float, ids: Sequence[int], colors, *, output: bool, label: Optional[str],
          fontsize: float, w: float = 0.92, h: float = 0.8) -> None:
    from matplotlib.patches import Polygon, Rectangle
    k = max(len(ids), 1)
    for j, s in enumerate(ids):                           # one stripe per sequence of the row
        ax.add_patch(Rectangle((x + j * w / k, y), w / k, h, facecolor=colors[s], edgecolor="none"))
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none", edgecolor="black" if output else "#666666",
                           linewidth=2.2 if output else 0.6))
    if output:                                            # a black corner flag on outputs
        c = min(0.28, 0.3 * h)
        ax.add_patch(Polygon([(x + w - c, y + h), (x + w, y + h), (x + w, y + h - c)], closed=True,
                             facecolor="black", edgecolor="none"))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fontsize, color="black",
                linespacing=0.95)


def _empty(ax, x: float, y: float, w: float = 0.92, h: float = 0.8) -> None:
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x, y), w, h, facecolor="white", edgecolor="#bbbbbb", linewidth=0.6, linestyle=(0, (2, 2))))


def _kv_lines(kv: Optional[List[dict]], span: int) -> List[Tuple[int, int, int]]:
    """The strips of the KV panel: (stream, first cell, last cell + 1), each at most `span` cells wide."""
    out = []
    for strip in kv or []:
        shown = min(strip["size"], max(strip["used_max_p1"], strip["head"]) + 1)
        for a in range(0, shown, span):
            out.append((strip["stream"], a, min(shown, a + span)))
    return out


def draw_plan(path: str, *, batch_seq_ids: List[List[int]], batch_pos: np.ndarray, batch_output: np.ndarray,
              ubatches: List[UBatch], out_ids: Sequence[int], n_ubatch: int, title: str,
              kv: Optional[List[dict]] = None, row_cells: Optional[list] = None) -> str:
    """Writes the PNG to `path`. batch_pos: int32[n_pos, n_tokens] (normalised), batch_output: int8[n_tokens].
    kv: per stream {"stream", "size", "used_max_p1", "head", "cells": [(index, pos, seq ids, ubatch)]};
    row_cells: per ubatch (stream int32[n_tokens], cell int32[n_tokens]) of its rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    n = len(batch_seq_ids)
    n_seq = max((max(ids) for ids in batch_seq_ids), default=0) + 1
    colors = _colors(n_seq)
    where = np.full(n, -1)
    for k, ub in enumerate(ubatches):
        where[ub.batch_idxs] = k
    widest = max([n_ubatch] + [ub.n_tokens for ub in ubatches])
    ncols = max(n, widest)
    big = ncols > 48
    fs = 8.5 if ncols <= 16 else (7.5 if ncols <= 28 else 6.5)
    out_pos = {int(b): j for j, b in enumerate(out_ids)}
    label_w = 3.2                                          # data units left of the cells for row titles
    span = max(ncols, 16)                                  # keep cells a readable size on small batches
    fig_w = min(26.0, 2.6 + 0.5 * span + 1.6)
    kv_lines = _kv_lines(kv, span)
    n_lines = 2 + len(ubatches) + (1.7 + 1.25 * len(kv_lines) if kv_lines else 0)
    fig_h = 1.6 + 0.55 * n_lines + 0.5
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))

    def row_y(line: int) -> float:
        return -(line * 1.0)

    # the batch, in row order
    y = row_y(0)
    ax.text(-0.3, y + 0.4, f"batch ({n} rows)", ha="right", va="center", fontsize=9, fontweight="bold")
    for i in range(n):
        lab = None if big else f"{i}\np{int(batch_pos[0, i])}\n→u{where[i]}"
        _cell(ax, i, y, batch_seq_ids[i], colors, output=bool(batch_output[i]), label=lab, fontsize=fs - 0.5)
    # each ubatch: rows in ubatch order, sequence sets separated, empty slots up to n_ubatch
    for k, ub in enumerate(ubatches):
        y = row_y(k + 2)
        ax.text(-0.3, y + 0.55, f"ubatch {k}", ha="right", va="center", fontsize=9, fontweight="bold")
        over = "  > n_ubatch!" if ub.n_tokens > n_ubatch else ""
        ax.text(-0.3, y + 0.15, f"{ub.n_seqs} x {ub.n_seq_tokens} = {ub.n_tokens}{over}", ha="right", va="center",
                fontsize=8, color="#b00000" if over else "#333333")
        bidx = ub.batch_idxs
        for r in range(ub.n_tokens):
            ids = ub.seq_ids(r).tolist()
            lab = None if big else f"b{int(bidx[r])}\np{int(ub.pos[0, r])}"
            if lab and row_cells is not None:
                st, ce = row_cells[k]
                lab += f"\n→c{int(ce[r])}" if len(kv or []) == 1 else f"\n→s{int(st[r])}:c{int(ce[r])}"
            if lab and int(bidx[r]) in out_pos:
                lab += f"\nout {out_pos[int(bidx[r])]}"
            _cell(ax, r, y, ids, colors, output=bool(ub.output[r]), label=lab,
                  fontsize=fs - 1.0 if row_cells is not None else fs)
        for r in range(ub.n_tokens, n_ubatch):
            _empty(ax, r, y)
        if ub.equal_seqs and ub.n_seqs > 1:               # brackets under each sequence set
            for s in range(ub.n_seqs):
                x0 = s * ub.n_seq_tokens
                ax.plot([x0 + 0.02, x0 + ub.n_seq_tokens - 0.1], [y - 0.08, y - 0.08], color="#333333", linewidth=1.2)
        if ub.n_tokens > n_ubatch:
            ax.add_patch(Rectangle((n_ubatch - 0.04, y - 0.1), 0.0, 1.0, edgecolor="#b00000", linewidth=1.5))
    # n_ubatch boundary
    ax.plot([n_ubatch - 0.04, n_ubatch - 0.04], [row_y(len(ubatches) + 1) - 0.2, row_y(2) + 1.0], color="#888888",
            linewidth=1, linestyle=":")
    ax.text(n_ubatch - 0.04, row_y(2) + 1.05, f"n_ubatch = {n_ubatch}", ha="center", va="bottom", fontsize=8, color="#555555")
    # out_ids
    oid = list(int(v) for v in out_ids)
    shown = oid if len(oid) <= 40 else oid[:40] + ["…"]
    y_out = row_y(len(ubatches) + 2) + 0.3
    ax.text(-0.3, y_out, "out_ids", ha="right", va="center", fontsize=9, fontweight="bold")
    ax.text(0, y_out, f"{shown}", ha="left", va="center", fontsize=9)
    ax.text(0, y_out - 0.45, "batch rows of the outputs in the order the ubatches emit them "
            "(logits row j belongs to batch row out_ids[j])", ha="left", va="center", fontsize=7.5, color="#444444")
    y_bottom = y_out - 0.8
    if kv_lines:
        y_bottom = _draw_kv(ax, kv, kv_lines, y_out - 1.5, colors, fs)
    ax.set_xlim(-label_w, span + 0.3)
    ax.set_ylim(y_bottom, row_y(0) + 1.35)
    ax.axis("off")
    handles = [Patch(facecolor=colors[s], edgecolor="#666666", label=f"seq {s}") for s in range(n_seq)
               if any(s in ids for ids in batch_seq_ids)]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=2.2, label="output row"))
    handles.append(Patch(facecolor="white", edgecolor="#bbbbbb", linestyle=(0, (2, 2)), label="empty slot"))
    if kv_lines:
        handles.append(Patch(facecolor="white", edgecolor="#bbbbbb", linestyle=(0, (2, 2)), label="empty KV cell"))
    ax.legend(handles=handles[:24], loc="upper left", bbox_to_anchor=(0.0, 0.0), ncol=min(len(handles), 10),
              frameon=False, fontsize=8)
    fig.suptitle(title, fontsize=11)
    ax.set_title("cells: batch row (b), position (p), →u = the ubatch the row went to, out j = row j of the "
                 "logits; striped = several sequences; bars under a ubatch mark its sequence sets"
                 + ("; →c = KV cell written (s = stream)" if kv_lines else ""), fontsize=8, color="#444444")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _draw_kv(ax, kv: List[dict], lines: List[Tuple[int, int, int]], y_top: float, colors, fs: float) -> float:
    """The KV panel from y_top down: one strip per (stream, cell range); returns the lowest y used.
    Cells: c = index, p = position, u = ubatch that wrote it; a thick bar separates ubatches."""
    ax.text(-0.3, y_top + 0.55, "KV cells", ha="right", va="center", fontsize=9, fontweight="bold")
    ax.text(0, y_top + 0.55, "each stream's cells (c index, p position, u = the ubatch that wrote it); "
            "thick bars separate ubatches, the triangle marks the head (next search start)",
            ha="left", va="center", fontsize=7.5, color="#444444")
    by_stream = {strip["stream"]: strip for strip in kv}
    n_cells = max(b - a for _, a, b in lines)
    labelled = n_cells <= 48
    y = y_top
    for st, a, b in lines:
        y -= 1.25
        strip = by_stream[st]
        cells = {c[0]: c for c in strip["cells"]}
        if a == 0:
            ax.text(-0.3, y + 0.55, f"stream {st}", ha="right", va="center", fontsize=9, fontweight="bold")
            ax.text(-0.3, y + 0.15, f"{len(strip['cells'])}/{strip['size']} used", ha="right", va="center",
                    fontsize=8, color="#333333")
        prev_u = None
        for i in range(a, b):
            x = i - a
            if i in cells:
                _, pos, seqs, u = cells[i]
                lab = f"c{i}\np{pos}\nu{u}" if labelled else None
                _cell(ax, x, y, seqs, colors, output=False, label=lab, fontsize=fs - 0.5)
                if prev_u is not None and u != prev_u:
                    ax.plot([x - 0.04, x - 0.04], [y - 0.1, y + 0.9], color="black", linewidth=2.2)
                if not labelled and u != prev_u:              # no cell labels: name each ubatch block
                    ax.text(x, y + 0.88, f"u{u}", ha="left", va="bottom", fontsize=7, color="#222222")
                prev_u = u
            else:
                _empty(ax, x, y)
                prev_u = None
        if a <= strip["head"] < b:
            hx = strip["head"] - a + 0.46
            ax.plot([hx], [y - 0.18], marker="^", color="#b00000", markersize=6)
    return y - 0.6
