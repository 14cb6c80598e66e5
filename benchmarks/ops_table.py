#!/usr/bin/env python3
"""Puts bench_ops's records beside torch_ops_peer.py's (same run, same machine) as a Markdown
table with the ratio dpl / PyTorch for forward and for forward plus backward (below 1: dpl is
faster), and marks ratios above the 1.5 limit. Given several peer logs (eager, compile,
reduce-overhead), each time is PyTorch's best over them, and the column says which mode gave it.

usage: ops_table.py DPL_RECORDS TORCH_RECORDS [MORE_TORCH_RECORDS ...]
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


def best(peers, name, key):
    """PyTorch's fastest time for one op and measure over the peer logs, and its mode."""
    found = [(float(p[name][key]), p[name].get("mode", "eager")) for p in peers if key in p.get(name, {})]
    return min(found) if found else None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ours, peers = read(sys.argv[1]), [read(path) for path in sys.argv[2:]]
    print("| op | shape | dpl fwd ms | torch fwd ms (mode) | ratio | dpl fwd+bwd ms | torch fwd+bwd ms (mode) | ratio |")
    print("|----|-------|-----------:|--------------------:|------:|---------------:|------------------------:|------:|")
    for name, r in ours.items():
        cells = []
        for key in ("fwd_ms", "fwd_bwd_ms"):
            peer = best(peers, name, key)
            if key not in r or peer is None:
                cells += [r.get(key, r.get("error", "n/a")), "n/a", ""]
                continue
            a, (b, mode) = float(r[key]), peer
            ratio = a / b
            cells += [f"{a:.3f}", f"{b:.3f} ({mode})", f"{ratio:.2f}" + (" (>1.5)" if ratio > 1.5 else "")]
        print(f"| {name} | {r.get('shape', '')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
