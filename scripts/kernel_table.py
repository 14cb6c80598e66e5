#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch kernel durations (a `--csv --page raw` export holding
gpu__time_duration.sum) by kernel name and prints the kernels by total time, largest first."""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv_file")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    with open(args.csv_file, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
    if header is None:
        sys.exit(f"{args.csv_file}: expected a header with 'Kernel Name' and 'gpu__time_duration.sum', found none")
    names = rows[header]
    name_col, time_col = names.index("Kernel Name"), names.index("gpu__time_duration.sum")
    total = collections.defaultdict(float)
    calls = collections.Counter()
    for r in rows[header + 1:]:
        if len(r) <= max(name_col, time_col):
            continue
        try:
            ns = float(r[time_col].replace(",", ""))
        except ValueError:
            continue  # the units row
        total[r[name_col]] += ns
        calls[r[name_col]] += 1
    if not total:
        sys.exit(f"{args.csv_file}: no kernel launches in the export")
    all_ns = sum(total.values())
    print(f"{sum(calls.values())} launches, {len(total)} kernels, {all_ns / 1e6:.3f} ms in all")
    print(f"{'ms':>9} {'share':>6} {'calls':>6} {'us/call':>9}  kernel")
    for name, ns in sorted(total.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{ns / 1e6:9.3f} {100 * ns / all_ns:5.1f}% {calls[name]:6d} {ns / 1e3 / calls[name]:9.1f}  {name[:110]}")


if __name__ == "__main__":
    main()
