#!/usr/bin/env python3
"""Summarizes a SASS CSV written by tools/ncu-sass.sh: the share of the warp-stall samples per
stall reason, then the instructions with the most samples and their two largest reasons.

  tools/sass-stalls.py NAME-sass.csv [--top 25]
"""
import argparse, collections, csv

ap = argparse.ArgumentParser()
ap.add_argument("csv", nargs="+")
ap.add_argument("--top", type=int, default=25)
args = ap.parse_args()


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def samples_of(row):
    return number(row["Warp Stall Sampling (All Samples)"])


for path in args.csv:
    rows = list(csv.reader(open(path)))
    header = rows[1]  # rows[0] names the kernel
    data = [dict(zip(header, r)) for r in rows[2:] if len(r) == len(header)]
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    samples = sum(samples_of(d) for d in data) or 1.0
    totals = collections.Counter()
    for d in data:
        for h in reasons:
            totals[h] += number(d[h])
    print(f"{path}: {rows[0][1] if len(rows[0]) > 1 else ''}, {samples:.0f} samples")
    for h, v in totals.most_common(10):
        print(f"  {h[6:]:<20} {100 * v / samples:5.1f} %")
    for d in sorted(data, key=samples_of, reverse=True)[:args.top]:
        share = 100 * samples_of(d) / samples
        largest = sorted(((number(d[h]), h[6:]) for h in reasons), reverse=True)[:2]
        print(f"  {d['Address'][-5:]} {share:5.2f} % {d['Source'][:58]:<58} "
              + " ".join(f"{h}={v:.0f}" for v, h in largest))
