"""op-equivalence's figure: the histogram of the sampled-token logprob differences per row."""

from __future__ import annotations

import math
from pathlib import Path


def draw_histograms(rows: dict[str, dict], path: Path) -> bool:
    """One panel per row with a histogram and at least one compared position (a row without
    any has nothing to show); False, and no file, when no row has one."""
    keys = [k for k, r in rows.items() if r.get("histogram") and r.get("logprob_diff_max") is not None]
    if not keys:
        return False
    import matplotlib  # heavy: only when there is something to draw
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = 2 if len(keys) > 1 else 1
    nrow = math.ceil(len(keys) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 2.6 * nrow), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        r = rows[key]
        h = r["histogram"]
        labels = ["0"] + [f"1e{int(e)}" for e in h["log10_edges"][:-1]]
        counts = [h["zero"]] + h["counts"]
        total = max(sum(counts) + (h.get("non_finite") or 0), 1)
        colors = ["tab:green"] + ["tab:blue"] * len(h["counts"])
        ax.bar(range(len(counts)), [c / total for c in counts], color=colors)
        ax.set_xticks(range(len(counts)))
        ax.set_xticklabels(labels, rotation=60, fontsize=7)
        ax.set_ylim(0, 1)
        bad = h.get("non_finite") or 0   # NaN / inf differences: not in any bin, named in the title
        ax.set_title(f"{key}  (max {r['logprob_diff_max']:.2g}, zero {r['exact_zero_fraction']:.1%}"
                     + (f", {bad} non-finite" if bad else "") + ")", fontsize=8)
        ax.set_ylabel("fraction", fontsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle("|logprob(decode) - logprob(verify)| of the sampled tokens (bin: lower edge; 0 = exactly equal)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
