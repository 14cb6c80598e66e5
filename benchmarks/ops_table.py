#!/usr/bin/env python3
"""Puts bench_ops's records beside torch_ops_peer.py's (same run, same machine) as a Markdown
table with the ratio dpl / PyTorch for forward and for forward plus backward (below 1: dpl is
faster), and marks ratios above the 1.5 limit.

usage: ops_table.py DPL_RECORDS TORCH_RECORDS
"""
import sys


def read(path):
    records = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("op="):
                continue
            fields = dict(p.split("=", 1) for p in line.split() if "=" in p)
            records[fields["op"]] = fields
    return records


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours, peer = read(sys.argv[1]), read(sys.argv[2])
    print("| op | shape | dpl fwd ms | torch fwd ms | ratio | dpl fwd+bwd ms | torch fwd+bwd ms | ratio |")
    print("|----|-------|-----------:|-------------:|------:|---------------:|-----------------:|------:|")
    for name, r in ours.items():
        p = peer.get(name, {})
        if "fwd_ms" not in r or "fwd_ms" not in p:
            print(f"| {name} | {r.get('shape', '')} | {r.get('error', 'n/a')} | | | | | |")
            continue
        cells = []
        for key in ("fwd_ms", "fwd_bwd_ms"):
            a, b = float(r[key]), float(p[key])
            ratio = a / b
            cells += [f"{a:.3f}", f"{b:.3f}", f"{ratio:.2f}" + (" (>1.5)" if ratio > 1.5 else "")]
        print(f"| {name} | {r['shape']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
