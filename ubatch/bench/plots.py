"""PNG plots of a suite run (matplotlib, an optional extra: `pip install ubatch[plot]`)."""
from __future__ import annotations

import os
from typing import Dict, List

PLOT_HINT = "matplotlib is not installed: no PNG plots written (install them with: pip install 'ubatch[plot]')"


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _by(rows, key):
    out: Dict[object, List[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def _family_grid(plt, families):
    n = len(families)
    cols = min(3, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    for k in range(n, nrows * cols):
        axes[k // cols][k % cols].set_visible(False)
    return fig, [axes[k // cols][k % cols] for k in range(n)]


def _lines(rows, value: str, ylabel: str, title: str, path: str, *, logy: bool, ylim=None, hline=None) -> str:
    plt = _pyplot()
    fams = _by(rows, "family")
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    colors = {s: plt.get_cmap("tab10")(k % 10) for k, s in enumerate(strategies)}
    markers = "osD^v<>ph*"
    fig, axes = _family_grid(plt, list(fams))
    for ax, (fam, frows) in zip(axes, fams.items()):
        for k, s in enumerate(strategies):
            pts = sorted((r["n_ubatch"], r[value]) for r in frows if r["strategy"] == s and "error" not in r)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[k % len(markers)], color=colors[s],
                        label=s, linewidth=1.6, markersize=7 if s.endswith("-llama") else 5, alpha=0.85,
                        linestyle="--" if s.endswith("-llama") else "-", markerfacecolor="none" if s.endswith("-llama") else None)
        ax.set_xscale("log", base=2)
        if logy:
            from matplotlib.ticker import FuncFormatter, LogLocator
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        if ylim:
            ax.set_ylim(*ylim)
        if hline is not None:
            ax.axhline(hline, color="grey", linewidth=0.8, linestyle=":")
        ns = sorted({r["n_ubatch"] for r in frows})
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_title(f"{fam} ({frows[0]['n_tokens']} tokens)", fontsize=11)
        ax.set_xlabel("n_ubatch")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[1:]:
        h, l = ax.get_legend_handles_labels()
        for hh, ll in zip(h, l):
            seen.setdefault(ll, hh)
    fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=len(seen), frameon=False, fontsize=10)
    fig.suptitle(title, fontsize=13)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _waste_heatmap(rows, path: str) -> str:
    plt = _pyplot()
    import numpy as np
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    keys = list(dict.fromkeys((r["family"], r["n_ubatch"]) for r in rows))
    cell = {(r["family"], r["n_ubatch"], r["strategy"]): r for r in rows}
    data = np.full((len(keys), len(strategies)), np.nan)
    for i, (fam, n) in enumerate(keys):
        for j, s in enumerate(strategies):
            r = cell.get((fam, n, s))
            if r is not None and "error" not in r:
                data[i, j] = r["excess_waste_pct"]
    fig, ax = plt.subplots(figsize=(2.4 + 1.5 * len(strategies), 1.4 + 0.42 * len(keys)))
    cmap = plt.get_cmap("Reds").with_extremes(bad="#dddddd")  # negative excess (a saved ubatch) shows white
    im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i, (fam, n) in enumerate(keys):
        for j, s in enumerate(strategies):
            r = cell.get((fam, n, s))
            if r is None:
                continue
            if "error" in r:
                txt, color = "n/a", "#555555"
            else:
                txt = f"{r['excess_waste_pct']:.0f}%  {r['n_ubatches']} ub"
                if r["extra_ubatches"] != 0:
                    txt += f" ({r['extra_ubatches']:+d})"
                if r["overflow_ubatches"]:
                    txt += f"\n{r['overflow_ubatches']} over n_ubatch"
                color = "white" if r["excess_waste_pct"] > 60 else "black"
            ax.text(j, i, txt, ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(range(len(strategies)))
    ax.set_xticklabels(strategies, rotation=20, ha="right")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{fam}  n_ubatch={n}" for fam, n in keys], fontsize=9)
    prev = None
    for i, (fam, _) in enumerate(keys):
        if prev is not None and fam != prev:
            ax.axhline(i - 0.5, color="black", linewidth=1.2)
        prev = fam
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="excess waste % (empty slots beyond split_simple's)")
    ax.set_title("Waste each strategy adds over split_simple (ubatches sized for n_ubatch tokens)\n"
                 "cell: excess waste %, ubatches (extra beyond simple); grey: the strategy refuses the batch",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(rows: List[Dict[str, object]], out_dir: str) -> List[str]:
    """plan_us.png, fill.png, waste.png under out_dir; returns their paths. Needs matplotlib."""
    ok = [r for r in rows if "error" not in r]
    paths = [
        _lines(ok, "plan_us", "µs per plan (median)", "Planning time: init + split_reset + split loop",
               os.path.join(out_dir, "plan_us.png"), logy=True),
        _lines(ok, "mean_fill", "mean fill (n_tokens / n_ubatch)", "Mean ubatch fill (1.0 = every ubatch full)",
               os.path.join(out_dir, "fill.png"), logy=False, ylim=(0, 1.1), hline=1.0),
        _waste_heatmap(rows, os.path.join(out_dir, "waste.png")),
    ]
    return paths
