#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The goals table and chart of docs/benchmarks.md, from bench/goals.sh.

Reads DIR/loopback.csv, DIR/mtu1500.csv and DIR/mtu1500-mss.csv
(wisp_bench --csv, the latest run of each CRC setting in each), the same
with -busy (WRITE 64 KiB beside a CPU-bound loop), DIR/connrate.txt
(wisp_connrate's output) and DIR/soak.txt (tests/fault/run-soak.sh's:
resident memory per idle QP), and writes a Markdown table: each goal, the figure on each path
(the ratio wisp / raw TCP of the same run, the wisp and TCP figures, and
CPU seconds per GiB moved for bandwidth), and whether it is met. The
chart shows the same ratios as bars beside each goal's line.

    /usr/bin/python3 bench/goals.py DIR --md DIR/goals.md -o docs/img/goals.png

A goal whose figure is missing (a test not run, a path not measured)
shows as "not measured", never as met.
"""
import argparse
import csv
import os
import re
import statistics
import sys

PATHS = [("loopback", "loopback"), ("mtu1500", "MTU 1500 veth"),
         ("mtu1500-mss", "MTU 1500, FPDU ≤ MSS")]

# (key, label, test, metric, crc, goal, higher_is_better, baseline, csv)
# csv: "" for PATH.csv, "-busy" for PATH-busy.csv.
GOALS = [
    ("w64", "WRITE 64 KiB", "write_64k", "bandwidth", "off", 0.95, True,
     "TCP", ""),
    ("w64c", "WRITE 64 KiB, CRC on", "write_64k", "bandwidth", "on", 0.90,
     True, "TCP", ""),
    ("w1m", "WRITE 1 MiB", "write_1m", "bandwidth", "off", 0.95, True,
     "TCP", ""),
    ("r64", "READ 64 KiB", "read_64k", "bandwidth", "off", 0.90, True,
     "TCP", ""),
    ("w4k", "WRITE 4 KiB", "write_4k", "bandwidth", "off", 0.80, True,
     "TCP", ""),
    ("s50", "SEND 8 B median", "send_lat", "p50_tcp_polled", "on", 1.10,
     False, "polled TCP", ""),
    ("s99", "SEND 8 B p99", "send_lat", "p99_tcp_polled", "on", 1.50,
     False, "polled TCP", ""),
    ("wpp", "WRITE ping-pong, memory-polling, median", "write_lat",
     "p50_send_lat", "on", 1.30, False, "SEND ping-pong", ""),
    ("busy", "WRITE 64 KiB, busy host", "write_64k",
     "bandwidth", "off", 0.80, True, "TCP beside the same CPU-bound loop", "-busy"),
]

GIB = 1 << 30
YMAX = 3.0      # the chart's ratio axis; a bar beyond it is cut and labelled


def latest_rows(path):
    """Rows of the latest run per CRC setting in a wisp_bench CSV."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    latest = {}
    for r in rows:
        if r["run"] > latest.get(r["crc"], ""):
            latest[r["crc"]] = r["run"]
    return [r for r in rows if latest.get(r["crc"]) == r["run"]]


def cpu_per_gib(cpus, gbit_s):
    """CPU seconds per GiB of payload: CPUs busy / GiB per second."""
    gib_s = float(gbit_s) * 1e9 / 8 / GIB
    return float(cpus) / gib_s if gib_s > 0 else float("nan")


def find(rows, test, metric, crc):
    """The row of that figure; io_uring's where both engines ran."""
    hits = [r for r in rows if r["test"] == test and r["metric"] == metric
            and r["crc"] == crc]
    hits.sort(key=lambda r: r["engine"] != "io_uring")
    return hits[0] if hits else None


def connrate(path):
    """(wisp conn/s median, slowest ms, TCP conn/s median) or None."""
    if not os.path.exists(path):
        return None
    wisp, tcp, slow = [], [], []
    # Columns: connected, conn/s, then median and max ms, or (since the
    # header names "p99 ms") p50, p99 and max ms. Only the burst mode
    # (wisp_connrate's default) measures the goal.
    pat = re.compile(r"^(rdma_cm|raw TCP)\s+(\d+)/(\d+)\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?")
    burst, max_col = True, 6
    with open(path) as f:
        for line in f:
            if line.startswith("mode: "):
                burst = line.startswith("mode: burst")
            if "conn/s" in line:
                max_col = 7 if "p99 ms" in line else 6
            m = pat.match(line)
            if not m or not burst:
                continue
            if m.group(1) == "rdma_cm":
                wisp.append(float(m.group(4)))
                slow.append(float(m.group(max_col)))
            else:
                tcp.append(float(m.group(4)))
    if not wisp:
        return None
    return statistics.median(wisp), max(slow), statistics.median(tcp), \
        len(wisp)


def soak(path):
    """(most KiB per idle QP of either side, QPs) or None."""
    if not os.path.exists(path):
        return None
    per_qp, n = [], 0
    with open(path) as f:
        for line in f:
            m = re.search(r"soak: (\d+) QPs connected;.*: ([\d.]+) KiB per QP",
                          line)
            if m:
                n = int(m.group(1))
                per_qp.append(float(m.group(2)))
            m = re.search(r"idle again after the busy phase:.*: ([\d.]+) KiB "
                          r"per QP", line)
            if m:
                per_qp.append(float(m.group(1)))
    return (max(per_qp), n) if per_qp and n else None


def cell(r, higher):
    if r is None:
        return "not measured"
    unit = r["unit"]
    s = f"{float(r['ratio']):.2f} ({float(r['wisp']):.3g} / " \
        f"{float(r['tcp']):.3g} {unit}"
    if higher:
        s += f"; CPU {cpu_per_gib(r['wisp_cpu'], r['wisp']):.2f} / " \
             f"{cpu_per_gib(r['tcp_cpu'], r['tcp']):.2f} s/GiB"
    return s + ")"


def verdict(r, goal, higher):
    if r is None:
        return None
    v = float(r["ratio"])
    return v >= goal if higher else v <= goal


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--md", help="write the Markdown table here")
    ap.add_argument("-o", "--output", help="write the chart (PNG) here")
    a = ap.parse_args()

    rows = {(p, src): latest_rows(os.path.join(a.dir, p + src + ".csv"))
            for p, _ in PATHS for src in {g[8] for g in GOALS}}
    if not any(rows.values()):
        sys.exit(f"goals.py: no wisp_bench CSV in {a.dir}")
    lines = []
    meta = []
    for (p, src), rs in sorted(rows.items()):
        label = dict(PATHS)[p] + (", busy loop beside" if src else "")
        runs = sorted({(r["run"], r["crc"], r["load"], r["engine"],
                        r["repeat"]) for r in rs})
        for run, crc, load, eng, rep in runs:
            meta.append(f"{label}: run {run}, CRC {crc}, engine {eng}, "
                        f"best of {rep}, load {load}")
    lines.append("| goal | " + " | ".join(l for _, l in PATHS) + " |")
    lines.append("| --- |" + " --- |" * len(PATHS))
    chart = []
    for key, label, test, metric, crc, goal, higher, base, src in GOALS:
        cells, marks = [], []
        for p, _ in PATHS:
            r = find(rows[(p, src)], test, metric, crc)
            ok = verdict(r, goal, higher)
            marks.append(ok)
            tag = "" if ok is None else (" **met**" if ok else " not met")
            cells.append(cell(r, higher) + tag)
            chart.append((label, p, None if r is None else
                          float(r["ratio"]), goal, higher))
        op = "≥" if higher else "≤"
        lines.append(f"| {label} {op} {goal:.2f}× {base} | " +
                     " | ".join(cells) + " |")
    cr = connrate(os.path.join(a.dir, "connrate.txt"))
    if cr:
        rate, slow, tcp, n = cr
        met = rate >= 5000 and slow <= 50
        lines.append(
            f"| rdma_cm connections ≥ 5,000/s, none slower than 50 ms "
            f"(loopback) | {rate:,.0f}/s (median of {n}), slowest "
            f"{slow:.0f} ms; raw TCP {tcp:,.0f}/s"
            f"{' **met**' if met else ' not met'} |" + " – |" * (len(PATHS) - 1))
    mem = soak(os.path.join(a.dir, "soak.txt"))
    if mem:
        worst, n = mem
        lines.append(
            f"| resident memory ≤ 64 KiB per idle connected QP (loopback, "
            f"{n:,} QPs) | {worst:.1f} KiB per QP, the most of either side, "
            f"idle and idle after a busy phase"
            f"{' **met**' if worst <= 64 else ' not met'} |" +
            " – |" * (len(PATHS) - 1))
    text = "\n".join(["Runs: " + "; ".join(meta), ""] + lines) + "\n"
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if a.output:
        draw(chart, a.output)


def draw(chart, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"goals.py: {sys.executable} has no matplotlib: apt-get "
                 "install python3-matplotlib and run /usr/bin/python3")
    labels = [g[1] for g in GOALS]
    fig, ax = plt.subplots(figsize=(11, 5.4))
    width = 0.27
    colours = {"loopback": "#4878a8", "mtu1500": "#e0a040",
               "mtu1500-mss": "#8a6bb0"}
    for i, (p, plabel) in enumerate(PATHS):
        xs, ys = [], []
        for j, g in enumerate(GOALS):
            v = next(c[2] for c in chart if c[0] == g[1] and c[1] == p)
            if v is not None:
                xs.append(j + (i - (len(PATHS) - 1) / 2) * width)
                ys.append(v)
        ax.bar(xs, [min(y, YMAX) for y in ys], width, color=colours[p])
        for x, y in zip(xs, ys):
            if y > YMAX:      # clipped: say how far it goes
                ax.annotate(f"{y:.1f}", (x, YMAX), ha="center",
                            va="bottom", fontsize=7)
    for j, g in enumerate(GOALS):
        ax.hlines(g[5], j - 0.45, j + 0.45, colors="black",
                  linestyles="dashed", linewidth=1.2)
        ax.annotate("≥" if g[6] else "≤", (j + 0.47, g[5]), fontsize=8,
                    va="center")
    ax.set_xticks(range(len(GOALS)))
    ax.set_xticklabels([l.replace(", ", "\n") for l in labels], fontsize=8)
    ax.set_ylim(0, YMAX * 1.08)
    ax.set_ylabel("wisp / its baseline in the same run\n(raw TCP; the WRITE ping-pong: the SEND ping-pong)", fontsize=9)
    ax.set_title("wisp against its goals (dashed: the goal)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colours[p], label=l) for p, l in PATHS],
              loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3,
              frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
