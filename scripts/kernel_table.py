#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch kernel measurements (a `--csv --page raw --print-units base`
export holding gpu__time_duration.sum) by kernel name and prints the kernels by total time,
largest first.

Where the export also holds the speed-of-light metrics (dram__throughput and sm__throughput as
.avg.pct_of_peak_sustained_elapsed, and dram__bytes.sum), each kernel also gets the bytes it moved
to and from device memory, its time-weighted share of the peak DRAM and SM rates, and its floor:
the time it would take if its busiest unit ran at that unit's peak, time x max(DRAM %, SM %) / 100,
summed over its launches. A second table lists the kernels by the gap between their time and that
floor, largest first: what tuning each kernel as it is written could win at most (a kernel that
moves more bytes than it must has a floor above its algorithm's)."""
import argparse
import collections
import csv
import sys

TIME = "gpu__time_duration.sum"
BYTES = "dram__bytes.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


class Kernel:
    """One kernel's launches summed: time (ns), calls and, with the speed-of-light metrics, bytes,
    time-weighted DRAM and SM shares, and the floor (ns)."""

    def __init__(self):
        self.ns = 0.0
        self.calls = 0
        self.bytes = 0.0
        self.dram_ns = 0.0  # sum of time x DRAM %/100
        self.sm_ns = 0.0
        self.floor_ns = 0.0

    def dram_pct(self):
        return 100 * self.dram_ns / self.ns if self.ns else 0.0

    def sm_pct(self):
        return 100 * self.sm_ns / self.ns if self.ns else 0.0


def number(text):
    """A metric's value as a float, or None for an empty or non-numeric cell (the units row)."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_kernels(path):
    """Returns ({name: Kernel}, has_speed_of_light) from the export at path; raises ValueError
    saying what was expected where the export has no header or no launches."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r and TIME in r), None)
    if header is None:
        raise ValueError(f"{path}: expected a header with 'Kernel Name' and '{TIME}', found none")
    names = rows[header]
    col = {n: names.index(n) for n in ("Kernel Name", TIME, BYTES, DRAM_PCT, SM_PCT) if n in names}
    sol = all(n in col for n in (BYTES, DRAM_PCT, SM_PCT))
    kernels = collections.defaultdict(Kernel)
    for r in rows[header + 1:]:
        if len(r) <= max(col.values()):
            continue
        ns = number(r[col[TIME]])
        if ns is None:
            continue  # the units row
        k = kernels[r[col["Kernel Name"]]]
        k.ns += ns
        k.calls += 1
        if sol:
            dram, sm = number(r[col[DRAM_PCT]]) or 0.0, number(r[col[SM_PCT]]) or 0.0
            k.bytes += number(r[col[BYTES]]) or 0.0
            k.dram_ns += ns * dram / 100
            k.sm_ns += ns * sm / 100
            k.floor_ns += ns * max(dram, sm) / 100
    if not kernels:
        raise ValueError(f"{path}: no kernel launches in the export")
    return dict(kernels), sol


def table(kernels, sol, top):
    """The printed tables, as a list of lines."""
    all_ns = sum(k.ns for k in kernels.values())
    lines = [f"{sum(k.calls for k in kernels.values())} launches, {len(kernels)} kernels, {all_ns / 1e6:.3f} ms in all"]
    by_time = sorted(kernels.items(), key=lambda kv: -kv[1].ns)[:top]
    if not sol:
        lines.append(f"{'ms':>9} {'share':>6} {'calls':>6} {'us/call':>9}  kernel")
        for name, k in by_time:
            lines.append(f"{k.ns / 1e6:9.3f} {100 * k.ns / all_ns:5.1f}% {k.calls:6d} {k.ns / 1e3 / k.calls:9.1f}  {name[:110]}")
        return lines
    floor_ns = sum(k.floor_ns for k in kernels.values())
    lines.append(f"at their busiest unit's peak: {floor_ns / 1e6:.3f} ms ({100 * floor_ns / all_ns:.0f}% of the time)")
    lines.append(f"{'ms':>9} {'share':>6} {'calls':>6} {'us/call':>9} {'GB':>7} {'DRAM%':>6} {'SM%':>5} {'floor':>7}  kernel")
    for name, k in by_time:
        lines.append(f"{k.ns / 1e6:9.3f} {100 * k.ns / all_ns:5.1f}% {k.calls:6d} {k.ns / 1e3 / k.calls:9.1f} "
                     f"{k.bytes / 1e9:7.3f} {k.dram_pct():6.1f} {k.sm_pct():5.1f} {k.floor_ns / 1e6:7.3f}  {name[:90]}")
    lines.append("")
    lines.append("largest gaps to the floor (ms):")
    lines.append(f"{'gap':>9} {'ms':>9} {'floor':>7}  kernel")
    for name, k in sorted(kernels.items(), key=lambda kv: -(kv[1].ns - kv[1].floor_ns))[:top]:
        lines.append(f"{(k.ns - k.floor_ns) / 1e6:9.3f} {k.ns / 1e6:9.3f} {k.floor_ns / 1e6:7.3f}  {name[:100]}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv_file")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    try:
        kernels, sol = read_kernels(args.csv_file)
    except (OSError, ValueError) as e:
        print(f"kernel_table: {e}", file=sys.stderr)
        return 1
    print("\n".join(table(kernels, sol, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
