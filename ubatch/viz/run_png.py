"""Timeline picture of a continuous-batching run (`ubatch run --png`): one bar per ubatch, stacked by
sequence (prompt tokens light, decode tokens dark), and the KV cells used per stream underneath.
Needs matplotlib (the optional extra `plot`)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ubatch.engine.engine_stats import RunStats

PLOT_HINT = "matplotlib is not installed: cannot draw --png (install it with: pip install 'ubatch[plot]')"


def _lighter(rgba, amount: float = 0.55):
    """The colour mixed with white (opaque, so stacked segments stay distinct)."""
    r, g, b = rgba[:3]
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount, 1.0)


def plot_timeline(stats: RunStats, path: str, *, config: Optional[dict] = None) -> None:
    """Writes the picture to `path` (format from the extension, PNG by default)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ImportError(PLOT_HINT) from e

    ubs = stats.ubatches
    n = len(ubs)
    seqs = sorted({s for u in ubs for s in u.seq_tokens})
    n_seq = max(seqs) + 1 if seqs else 1
    cmap = plt.get_cmap("tab10" if n_seq <= 10 else "tab20" if n_seq <= 20 else "hsv")
    colours = [cmap(s % cmap.N) if n_seq <= 20 else cmap(s / n_seq) for s in range(n_seq)]

    # stacked segments: per sequence, prompt then decode tokens
    prompt = np.zeros((n_seq, n), np.int32)
    dec = np.zeros((n_seq, n), np.int32)
    for k, u in enumerate(ubs):
        for s, (p, d) in u.seq_tokens.items():
            prompt[s, k], dec[s, k] = p, d
    x = np.arange(n)
    width = 1.0 if n > 150 else 0.85

    times = [t for t in getattr(stats, "times", []) if getattr(t, "ub_admitted", -1) >= 0]
    if times:       # the text engine: a third panel with every request's life
        fig, (ax, ax2, ax3) = plt.subplots(3, 1, figsize=(min(22.0, max(13.0, n / 28)), 10.5), sharex=True,
                                           gridspec_kw={"height_ratios": [3, 2, 2.2]})
    else:
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(min(22.0, max(13.0, n / 28)), 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
        ax3 = None
    bottom = np.zeros(n)
    for s in seqs:
        for arr, c in ((dec[s], colours[s]), (prompt[s], _lighter(colours[s]))):
            if arr.any():
                ax.bar(x, arr, width, bottom=bottom, color=c, linewidth=0)
                bottom += arr
    ax.axhline(stats.n_ubatch, color="black", linestyle="--", linewidth=1)
    ax.text(0, stats.n_ubatch, f" n_ubatch = {stats.n_ubatch}", va="bottom", ha="left", fontsize=9)
    ax.set_ylabel("tokens in the ubatch")
    ax.set_ylim(0, max(stats.n_ubatch, int(bottom.max()) if n else 1) * 1.12)

    # decode calls: light background bands alternate per call
    calls = np.array([u.call for u in ubs])
    if n and len(set(calls.tolist())) <= 80:
        starts = np.flatnonzero(np.r_[True, calls[1:] != calls[:-1]])
        ends = np.r_[starts[1:], n]
        for j, (a, b) in enumerate(zip(starts, ends)):
            if j % 2:
                ax.axvspan(a - 0.5, b - 0.5, color="0.93", zorder=0, linewidth=0)
                ax2.axvspan(a - 0.5, b - 0.5, color="0.93", zorder=0, linewidth=0)

    marks = {"retry": ("v", "tab:red", "retry (n_batch halved)"), "evicted": ("x", "black", "request evicted"),
             "rejected": ("s", "tab:gray", "request rejected"), "error": ("x", "tab:red", "decode error"),
             "preempted": ("x", "black", "sequence preempted (recomputed later)")}
    seen = set()
    ytop = ax.get_ylim()[1] * 0.97
    for k, kind, _ in stats.events:
        m, c, label = marks[kind]
        ax.plot([min(k, max(n - 1, 0)) - 0.5], [ytop], marker=m, color=c, linestyle="none", markersize=6,
                label=None if kind in seen else label)
        seen.add(kind)

    handles = [Patch(color=colours[s], label=f"seq {s}") for s in seqs[:20]]
    handles += [Patch(facecolor="0.35", label="decode tokens (dark)"),
                Patch(facecolor=_lighter((0.35, 0.35, 0.35, 1.0)), label="prompt tokens (light)")]
    h2, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + h2, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)

    # KV occupancy per stream, sampled after each successful decode call (at its last ubatch)
    used = np.array([u for _, u in stats.kv_used], np.int32) if stats.kv_used else np.zeros((0, stats.n_stream))
    if n and len(used):
        last_ub = np.r_[np.flatnonzero(calls[1:] != calls[:-1]), n - 1]
        xs = last_ub[:len(used)]
        if stats.n_stream == 1:
            ax2.fill_between(xs, used[:, 0], step="post", color="tab:blue", alpha=0.35, linewidth=0)
            ax2.step(xs, used[:, 0], where="post", color="tab:blue", linewidth=1.2, label="stream 0 (shared)")
        elif stats.n_stream <= 20:
            for s in range(stats.n_stream):
                ax2.step(xs, used[:, s], where="post", color=colours[s % len(colours)], linewidth=1.3,
                         label=f"stream {s}")
        else:
            ax2.step(xs, used.max(axis=1), where="post", color="tab:red", label="max over streams")
            ax2.step(xs, used.mean(axis=1), where="post", color="tab:blue", label="mean over streams")
    ax2.axhline(stats.kv_size, color="black", linestyle="--", linewidth=1)
    ax2.text(0, stats.kv_size, f" {stats.kv_size} cells per stream", va="bottom", ha="left", fontsize=9)
    ax2.set_ylim(0, stats.kv_size * 1.15)
    ax2.set_ylabel("KV cells used")
    xlabel = "ubatch, in decode order" + ("" if n and len(set(calls.tolist())) > 80
                                          else " (shaded bands: alternate decode calls)")
    if ax3 is None:
        ax2.set_xlabel(xlabel)
    else:
        _requests_panel(ax3, times, colours, n)
        ax3.set_xlabel(xlabel)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    ax2.set_xlim(-0.5, max(n, 1) - 0.5)

    d = stats.to_dict()
    lost = (f"{d['preemptions']} preempted" if "preemptions" in d else f"{d['evicted']} evicted")
    title = (f"{d['requests']} requests: {d['finished']} finished, {lost} | "
             f"{d['ubatches']} ubatches in {d['decode_calls']} decode calls, mean fill {d['mean_fill']:.2f}, "
             f"{len(d['shapes'])} shapes, {d['retries']} retries")
    if config:
        title = (f"ubatch run — {config.get('model', '')}, parallel {config.get('parallel')}, n_batch "
                 f"{config.get('n_batch')}, n_ubatch {config.get('n_ubatch')}, "
                 f"{'unified KV' if config.get('kv_unified') else 'KV stream per sequence'}\n" + title)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _requests_panel(ax, times, colours, n: int) -> None:
    """One row per request: queued (grey, from the start), prompt until its first token (light), generating until
    it finished (its first sequence's colour); x in ubatches, like the panels above."""
    from matplotlib.patches import Patch
    k = len(times)
    for i, t in enumerate(times):
        end = t.ub_finished if t.ub_finished >= 0 else n
        first = t.ub_first if t.ub_first >= 0 else end
        c = colours[t.seq_id % len(colours)] if t.seq_id >= 0 else (0.4, 0.4, 0.4, 1.0)
        ax.barh(i, t.ub_admitted, left=0, height=0.8, color="0.88", linewidth=0)
        ax.barh(i, max(first - t.ub_admitted, 0.4), left=t.ub_admitted, height=0.8, color=_lighter(c), linewidth=0)
        ax.barh(i, max(end - first, 0.4), left=first, height=0.8, color=c, linewidth=0)
    ax.set_ylim(k - 0.4, -0.6)
    ax.set_ylabel("request")
    if k > 24:
        ax.set_yticks(np.arange(0, k, max(1, k // 12)))
    ax.legend(handles=[Patch(color="0.88", label="queued"), Patch(color=_lighter((0.35, 0.35, 0.35, 1.0)),
                       label="prompt (until 1st token)"), Patch(color="0.35", label="generating (seq colour)")],
              loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


__all__ = ["PLOT_HINT", "plot_timeline"]
