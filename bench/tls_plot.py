#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Bar chart of wisp_tls_bench runs against the goals of docs/tls.md.

Takes the printed output of several wisp_tls_bench runs, each named with a
label (LABEL=FILE, the same label for repeats of one build), and draws the
two ratios each run measured against its own baseline: TLS WRITE 64 KiB
over the raw OpenSSL TLS pair (goal >= 0.90) and SEND 8 B round trip over
TLS against plaintext wisp (goal <= 1.2), one bar per run, grouped by
label, with the goals as lines.

    python3 bench/tls_plot.py before=run1.txt after=run2.txt ... \\
        -o docs/img/tls.png

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import re
import sys

try:
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(f"tls_plot.py: {sys.executable} has no matplotlib: apt-get "
             "install python3-matplotlib and run /usr/bin/python3")

WRITE = re.compile(r"^wisp TLS / raw TLS\s+([0-9.]+)", re.M)
SEND = re.compile(r"^TLS / plaintext \(median\)\s+([0-9.]+)", re.M)
LOAD = re.compile(r"^load ([0-9.]+)", re.M)


def parse(path):
    with open(path) as f:
        text = f.read()
    w, s = WRITE.search(text), SEND.search(text)
    if not w or not s:
        sys.exit(f"tls_plot.py: {path}: not wisp_tls_bench output")
    load = LOAD.search(text)
    return float(w.group(1)), float(s.group(1)), \
        float(load.group(1)) if load else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="wisp TLS 1.3 under MPA, 127.0.0.1")
    args = ap.parse_args()

    groups = {}
    for arg in args.runs:
        label, sep, path = arg.partition("=")
        if not sep:
            sys.exit(f"tls_plot.py: {arg}: expected LABEL=FILE")
        groups.setdefault(label, []).append(parse(path))

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    panels = [(0, "WRITE 64 KiB: wisp TLS / raw OpenSSL TLS pair\n"
                  "(higher is better)", 0.90, "goal >= 0.90"),
              (1, "SEND 8 B round trip: TLS / plaintext wisp\n"
                  "(lower is better)", 1.2, "goal <= 1.2")]
    colours = ["#999999", "#1f77b4", "#2ca02c", "#d62728"]
    for ax, (idx, title, goal, goal_label) in zip(axes, panels):
        x = 0
        top = goal
        ticks, names = [], []
        for g, (label, runs) in enumerate(groups.items()):
            xs = [x + i for i in range(len(runs))]
            ax.bar(xs, [r[idx] for r in runs], color=colours[g % 4],
                   label=label)
            for xi, r in zip(xs, runs):
                ax.text(xi, r[idx], f"{r[idx]:.2f}", ha="center",
                        va="bottom", fontsize=8)
            top = max([top] + [r[idx] for r in runs])
            ticks.append(x + (len(runs) - 1) / 2)
            names.append(label)
            x += len(runs) + 1
        ax.axhline(goal, color="black", linestyle="--", linewidth=1,
                   label=goal_label)
        ax.set_xticks(ticks)
        ax.set_xticklabels(names)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, top * 1.3)
        ax.legend(fontsize=8, loc="upper left", ncol=3)
    loads = [r[2] for runs in groups.values() for r in runs
             if r[2] is not None]
    sub = args.title
    if loads:
        sub += f" (1-min load average {min(loads):.1f} to {max(loads):.1f})"
    fig.suptitle(sub + "; one bar per run, each the median of its rounds",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)


if __name__ == "__main__":
    main()
