#!/usr/bin/env python3
"""plot.py - busbw against message size, hoop beside Gloo and OpenMPI, one
panel per configuration, from the raw outputs (bench/summarize.py reads
them: medians over repeats, bars from min to max).

    bench/plot.py OUT.png TITLE=DIR [TITLE=DIR ...]   (split at the last "=")

Each DIR is one configuration as bench/netns.sh or bench/compare_loopback.sh
writes it, on disk or in its campaign's archive (bench/summarize.py says
how); on a shaped link the iperf3 goodput of one link is drawn as a
dashed line. Needs python3-matplotlib (Debian's package).
"""
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402

STYLE = {
    "hoop": dict(color="tab:red", marker="o", label="hoop (out of place)"),
    "gloo": dict(color="tab:blue", marker="s", label="Gloo ring_chunked"),
    "ompi": dict(color="tab:green", marker="^", label="OpenMPI, TCP BTL"),
    "tgloo": dict(color="tab:purple", marker="v", label="torch.distributed gloo"),
}


def panel(ax, title, d):
    data = summarize.load(d)
    for sysname in summarize.SYSTEMS:
        per = data[sysname]
        if not per:
            continue
        sizes = sorted(per)
        med = [statistics.median(v[0] for v in per[s]) for s in sizes]
        lo = [m - min(v[0] for v in per[s]) for m, s in zip(med, sizes)]
        hi = [max(v[0] for v in per[s]) - m for m, s in zip(med, sizes)]
        ax.errorbar(sizes, med, yerr=[lo, hi], capsize=2, linewidth=1.2, markersize=4,
                    **STYLE[sysname])
    if data["iperf"]:
        ax.axhline(statistics.median(data["iperf"]), color="gray", linestyle="--",
                   linewidth=1, label="iperf3, one link")
    ax.set_xscale("log", base=2)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda x, _: summarize.size_str(int(x)).replace(" ", "") if x >= 1 else ""))
    ax.legend(fontsize=7, loc="upper left")


def main(argv):
    if len(argv) < 3 or any("=" not in a for a in argv[2:]):
        sys.stderr.write(__doc__)
        return 2
    panels = [a.rsplit("=", 1) for a in argv[2:]]
    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for ax, (title, d) in zip(axes.flat, panels):
        panel(ax, title, d)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("allreduce, float32 sum: busbw = size / time x 2(N-1)/N", fontsize=11)
    fig.tight_layout()
    fig.savefig(argv[1], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
