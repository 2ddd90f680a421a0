#!/usr/bin/python3
"""Goodput against RTT from bench/wan-goodput.sh's CSV: iperf3 and
wisp-repl's three modes (median of the repeats, the spread as error
bars), and the limits that predict the modes:

  WRITE, SEND:  credits x chunk / RTT          (one RTT per slot cycle)
  READ-pull:    ORD x chunk / RTT, and credits x chunk / (2 RTT)
                (a slot is busy two RTTs: OFFER, READ, CREDIT)

each capped by the link's TCP payload rate (rate x 1448/1514).

  bench/wan-goodput-plot.py [--csv FILE] [--png FILE] [--ord N]
      [--rate-mbit R] [--extra CSV ...]

--extra: more CSVs (e.g. runs with a small chunk or window, where the
predicted limits bind), each drawn as a panel of its own.
docs/replication.md, "Goodput against RTT".
"""
import argparse
import csv
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    ("iperf3", "tcp"): ("iperf3, 1 stream", "k", "o"),
    ("wisp-repl", "write"): ("wisp-repl write (WRITE + SEND credits)", "C0", "s"),
    ("wisp-repl", "read"): ("wisp-repl read (READ-pull)", "C1", "^"),
    ("wisp-repl", "send"): ("wisp-repl send (SEND/RECV)", "C2", "v"),
}


def load(path):
    rows = defaultdict(list)
    meta = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["loss_pct"] not in ("0", "0.0") or r["streams"] != "1":
                continue
            key = (r["what"], r["mode"])
            try:
                rows[key].append((float(r["rtt_ms"]), float(r["goodput_MBps"])))
            except (TypeError, ValueError):
                continue  # a row of a failed transfer
            if r["what"] == "wisp-repl":
                meta["window"] = int(r["window"])
                meta["chunk"] = int(r["chunk"])
            meta.setdefault("dates", set()).add(r["date_utc"][:10])
            meta.setdefault("load", []).append(float(r["load1"]))
            if r["what"] == "wisp-repl":
                meta["size"] = int(r["bytes"])
    return rows, meta


def panel(ax, rows, meta, ordv, link, title):
    rtts = sorted({x for v in rows.values() for x, _ in v})
    for key, (label, color, marker) in STYLE.items():
        if key not in rows:
            continue
        by = defaultdict(list)
        for x, y in rows[key]:
            by[x].append(y)
        xs = sorted(by)
        med = [statistics.median(by[x]) for x in xs]
        lo = [m - min(by[x]) for m, x in zip(med, xs)]
        hi = [max(by[x]) - m for m, x in zip(med, xs)]
        ax.errorbar(xs, med, yerr=[lo, hi], label=label, color=color,
                    marker=marker, capsize=3)
    if "window" in meta and rtts:
        w, c = meta["window"], meta["chunk"]
        fine = [rtts[0] * (rtts[-1] / rtts[0]) ** (i / 200) for i in range(201)]
        send = [min(link, w * c / (r / 1e3) / 1e6) for r in fine]
        rord = [min(link, ordv * c / (r / 1e3) / 1e6) for r in fine]
        rwin = [min(link, w * c / (2 * r / 1e3) / 1e6) for r in fine]
        ax.plot(fine, send, "--", color="C2",
                label="predicted SEND/WRITE: min(link, credits %d x %d KiB / RTT)" % (w, c >> 10))
        ax.plot(fine, rord, ":", color="C1",
                label="predicted READ: min(link, ORD %d x %d KiB / RTT)" % (ordv, c >> 10))
        ax.plot(fine, rwin, "-.", color="C1", alpha=0.6,
                label="predicted READ: min(link, credits x %d KiB / 2 RTT)" % (c >> 10))
    ax.axhline(link, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks(rtts)
    ax.set_xticklabels(["%g" % r for r in rtts])
    ax.set_xlabel("RTT (ms)")
    ax.set_ylabel("goodput (MB/s)")
    ax.set_ylim(0, link * 1.15)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--csv", default="bench/wan-goodput.csv")
    p.add_argument("--extra", nargs="*", default=[])
    p.add_argument("--png", default="docs/img/wan-goodput.png")
    p.add_argument("--ord", type=int, default=128)
    p.add_argument("--rate-mbit", type=float, default=1000)
    a = p.parse_args()
    link = a.rate_mbit * 1e6 / 8 * 1448 / 1514 / 1e6
    csvs = [a.csv] + a.extra
    ncol = min(len(csvs), 2)
    nrow = (len(csvs) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(7 * ncol, 5 * nrow),
                             squeeze=False)
    for ax in axes.flat[len(csvs):]:
        ax.axis("off")
    for ax, path in zip(axes.flat, csvs):
        rows, meta = load(path)
        title = "%g Mbit/s, chunk %d KiB, window %d, %d MiB per transfer\n%s, load avg %.0f-%.0f" % (
            a.rate_mbit, meta.get("chunk", 0) >> 10, meta.get("window", 0),
            meta.get("size", 0) >> 20, ", ".join(sorted(meta.get("dates", []))),
            min(meta.get("load", [0])), max(meta.get("load", [0])))
        panel(ax, rows, meta, a.ord, link, title)
    fig.suptitle("wisp-repl over wisp vs iperf3 across the emulated WAN (tests/wan)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print("wrote", a.png)


if __name__ == "__main__":
    main()
