#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Bar chart of wisp_bench results: wisp against raw TCP, per test.

Reads the CSV that `wisp_bench --csv FILE` appends to and draws, for the
latest run of each CRC setting found there (or the runs named with --run),
one row per run: bandwidth bars (Gbit/s, higher is better) and latency
bars (microseconds, lower is better), raw TCP as measured in that run
beside wisp, then wisp for each engine.

    python3 bench/plot.py bench/results.csv -o docs/img/bench.png

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import csv
import sys

try:
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:
    sys.exit(f"plot.py: {sys.executable} has no matplotlib: apt-get install "
             "python3-matplotlib and run /usr/bin/python3, or pip install "
             "matplotlib")

BW_TESTS = [("write_64k", "WRITE 64 KiB"), ("write_1m", "WRITE 1 MiB"),
            ("read_64k", "READ 64 KiB")]
LAT_METRICS = [("p50", "SEND 8 B median"), ("p99", "SEND 8 B p99")]
POLLED = "_tcp_polled"   # the same wisp figure against polled TCP
COLUMNS = {"run", "host", "engine", "crc", "test", "metric", "unit", "wisp",
           "tcp"}


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not COLUMNS.issubset(rows[0].keys()):
        sys.exit(f"plot.py: {path}: not a wisp_bench CSV (no rows, or "
                 f"columns missing: {sorted(COLUMNS)})")
    return rows


def pick_runs(rows, wanted):
    """The runs to draw: those named, else the latest one per CRC setting."""
    if wanted:
        missing = set(wanted) - {r["run"] for r in rows}
        if missing:
            sys.exit(f"plot.py: no run {', '.join(sorted(missing))} in CSV")
        return wanted
    latest = {}
    for r in rows:
        if r["run"] > latest.get(r["crc"], ""):
            latest[r["crc"]] = r["run"]
    # CRC on (what users run) first.
    return [latest[k] for k in sorted(latest, key=lambda c: c != "on")]


def series(rows, run):
    """[(label, {(test, metric): value})] of one run: its TCP baselines
    (measured beside wisp in that run), then wisp per engine."""
    tcp, polled, wisp = {}, {}, {}
    for r in rows:
        if r["run"] != run:
            continue
        if r["metric"].endswith(POLLED):
            polled[(r["test"], r["metric"][:-len(POLLED)])] = float(r["tcp"])
            continue
        tcp[(r["test"], r["metric"])] = float(r["tcp"])
        wisp.setdefault(f"wisp {r['engine']}", {})[
            (r["test"], r["metric"])] = float(r["wisp"])
    out = [("raw TCP", tcp)]
    if polled:
        out.append(("raw TCP, polled like wisp (latency)", polled))
    # io_uring before epoll, as wisp_bench prints them.
    out.extend(sorted(wisp.items(), key=lambda kv: "epoll" in kv[0]))
    return out


def bars(ax, groups, data, colors, unit, title):
    """Grouped bars; a series with nothing in these groups takes no slot."""
    present = [(label, values) for label, values in data
               if any(key in values for key in groups)]
    n = len(present)
    width = 0.8 / n
    for i, (label, values) in enumerate(present):
        xs, ys = [], []
        for g, key in enumerate(groups):
            if key in values:
                xs.append(g + (i - (n - 1) / 2) * width)
                ys.append(values[key])
        rects = ax.bar(xs, ys, width, label=label, color=colors[label])
        ax.bar_label(rects, fmt="%.1f", fontsize=7, padding=1)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.margins(y=0.12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?", default="bench/results.csv",
                    help="wisp_bench --csv output (default: %(default)s)")
    ap.add_argument("-o", "--output", default="docs/img/bench.png",
                    help="PNG to write (default: %(default)s)")
    ap.add_argument("--run", action="append", default=[],
                    help="draw this run (the CSV's run column); repeatable")
    args = ap.parse_args()

    rows = load(args.csv)
    runs = pick_runs(rows, args.run)
    host = next(r["host"] for r in rows if r["run"] == runs[0])

    fig, axes = plt.subplots(len(runs), 2, squeeze=False,
                             figsize=(12, 0.6 + 4.2 * len(runs)),
                             gridspec_kw={"width_ratios": [3, 2]})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {}
    for run, (bw, lat) in zip(runs, axes):
        data = series(rows, run)
        for label, _ in data:
            colors.setdefault(label, palette[len(colors) % len(palette)])
        crc = next(r["crc"] for r in rows if r["run"] == run)
        bars(bw, [(t, "bandwidth") for t, _ in BW_TESTS], data, colors,
             "Gbit/s", f"Bandwidth, CRC {crc} (higher is better)")
        bw.set_xticks(range(len(BW_TESTS)), [name for _, name in BW_TESTS])
        bars(lat, [("send_lat", m) for m, _ in LAT_METRICS], data, colors,
             "microseconds (round trip / 2)",
             f"Latency, CRC {crc} (lower is better)")
        lat.set_xticks(range(len(LAT_METRICS)), [n for _, n in LAT_METRICS])
    handles = [Patch(color=c, label=label) for label, c in colors.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles),
               fontsize=8, frameon=False)
    fig.suptitle(f"wisp vs raw TCP over 127.0.0.1 on {host} "
                 f"(run {', '.join(runs)})", fontsize=10)
    fig.tight_layout(rect=(0, 0.5 / (0.6 + 4.2 * len(runs)), 1, 1))
    fig.savefig(args.output, dpi=110)
    print(f"plot.py: wrote {args.output} from {len(runs)} run(s) of "
          f"{args.csv}")


if __name__ == "__main__":
    main()
