#!/usr/bin/env python3
"""Summarise bench/zc.sh runs: one Markdown row per path, CRC and test,
with the median over the repeats of wisp's bandwidth and CPU seconds per
GiB with WISP_SEND_ZC=off and =on, and raw TCP's (from the same wisp_bench
runs, both settings together), and the 1-minute load averages seen.

    bench/zc_summary.py OUTDIR [OUTDIR ...]
"""
import csv
import glob
import os
import re
import statistics
import sys


def main(dirs):
    rows = {}
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "*-zc*.csv"))):
            m = re.match(r"(.+)-(crc|nocrc)-(uring|epoll)-zc(on|off)\.csv$",
                         os.path.basename(f))
            if not m:
                continue
            path, crc, engine, zc = m.groups()
            with open(f, newline="") as fh:
                for r in csv.DictReader(fh):
                    k = (path, crc, r["test"], engine)
                    e = rows.setdefault(k, {"off": {}, "on": {}, "tcp": {},
                                            "load": [], "engine": set()})
                    e["engine"].add(r["engine"])
                    e["load"].append(float(r["load"]))
                    e[zc].setdefault(r["metric"], []).append(float(r["wisp"]))
                    e["tcp"].setdefault(r["metric"], []).append(float(r["tcp"]))
    print("| path | CRC | test | engine | ZC off Gbit/s | ZC on Gbit/s | "
          "raw TCP Gbit/s | ZC off s/GiB | ZC on s/GiB | TCP s/GiB | "
          "on / off | runs | load |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | --- |")
    order = {"loopback": 0, "mtu1500": 1, "mtu1500-mss": 2}
    for k in sorted(rows, key=lambda k: (order.get(k[0], 9), k[3] != "uring",
                                         k[1], k[2])):
        e = rows[k]
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        bw = {s: med(e[s].get("bandwidth", [])) for s in ("off", "on", "tcp")}
        cpu = {s: med(e[s].get("cpu_per_gib", [])) for s in
               ("off", "on", "tcp")}
        n = min(len(e["off"].get("bandwidth", [])),
                len(e["on"].get("bandwidth", [])))
        print(f"| {k[0]} | {'on' if k[1] == 'crc' else 'off'} | {k[2]} | "
              f"{'/'.join(sorted(e['engine']))} | {bw['off']:.2f} | "
              f"{bw['on']:.2f} | {bw['tcp']:.2f} | {cpu['off']:.3f} | "
              f"{cpu['on']:.3f} | {cpu['tcp']:.3f} | "
              f"{bw['on'] / bw['off']:.2f} | {n} + {n} | "
              f"{min(e['load']):.1f}–{max(e['load']):.1f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
