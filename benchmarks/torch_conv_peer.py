#!/usr/bin/env python3
"""The PyTorch side of bench_conv: the same ResNet-50 convolution shapes, timed the same way
(median of per-call times with a device synchronisation after each call; a gradient's time is a
backward pass through sum(conv(x, w) * gy) minus that loss's forward), with cudnn.benchmark on.
Prints the same key=value records as bench_conv, so the two outputs can be joined by shape.

  python3 torch_conv_peer.py [-b 128] [--dtype float32|bfloat16|float16] [--layout nchw|nhwc]
                             [--reps 10] [--tf32]
  python3 torch_conv_peer.py --device cpu --threads 2 -b 8 --shape 64,56,56,64,3,1,1 [--layout nchw]
                             # one shape (C,H,W,O,k,stride,pad) on the CPU, as bench_conv --device cpu
  python3 torch_conv_peer.py --compare DPL_OUTPUT PEER_OUTPUT   # table of dpl / PyTorch per shape
"""
import argparse
import math
import statistics
import sys
import time

# Every distinct convolution of ResNet-50 at 224x224 (v1.5), as in bench_conv: C, H, W, O, k, stride, pad.
SHAPES = [
    (3, 224, 224, 64, 7, 2, 3),
    (64, 56, 56, 64, 1, 1, 0), (64, 56, 56, 64, 3, 1, 1), (64, 56, 56, 256, 1, 1, 0), (256, 56, 56, 64, 1, 1, 0),
    (256, 56, 56, 128, 1, 1, 0), (128, 56, 56, 128, 3, 2, 1), (128, 28, 28, 512, 1, 1, 0),
    (256, 56, 56, 512, 1, 2, 0), (512, 28, 28, 128, 1, 1, 0), (128, 28, 28, 128, 3, 1, 1),
    (512, 28, 28, 256, 1, 1, 0), (256, 28, 28, 256, 3, 2, 1), (256, 14, 14, 1024, 1, 1, 0),
    (512, 28, 28, 1024, 1, 2, 0), (1024, 14, 14, 256, 1, 1, 0), (256, 14, 14, 256, 3, 1, 1),
    (1024, 14, 14, 512, 1, 1, 0), (512, 14, 14, 512, 3, 2, 1), (512, 7, 7, 2048, 1, 1, 0),
    (1024, 14, 14, 2048, 1, 2, 0), (2048, 7, 7, 512, 1, 1, 0), (512, 7, 7, 512, 3, 1, 1),
]


def records(path):
    out = {}
    for line in open(path):
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "shape" in fields and "total_ms" in fields:
            out[fields["shape"]] = fields
    return out


def compare(dpl_path, peer_path):
    dpl, peer = records(dpl_path), records(peer_path)
    ratios = []
    print(f"{'shape N,C,H,W,O,kh,kw,s,p':32} {'dpl ms':>9} {'torch ms':>9} {'torch/dpl':>9}")
    for shape, d in dpl.items():
        if shape not in peer:
            continue
        a, b = float(d["total_ms"]), float(peer[shape]["total_ms"])
        ratios.append(b / a)
        print(f"{shape:32} {a:9.4f} {b:9.4f} {b / a:9.3f}")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"summary shapes={len(ratios)} geomean_speedup={geo:.3f} min_speedup={min(ratios):.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-b", "--batch", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--tf32", action="store_true", help="let float32 convolutions use TF32 (PyTorch's default)")
    p.add_argument("--compare", nargs=2, metavar=("DPL", "PEER"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--shape", help="one shape C,H,W,O,k,stride,pad instead of ResNet-50's")
    a = p.parse_args()
    if a.compare:
        return compare(*a.compare)

    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = a.tf32
    if a.threads:
        torch.set_num_threads(a.threads)
    shapes = [tuple(int(v) for v in a.shape.split(","))] if a.shape else SHAPES

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    fmt = torch.channels_last if a.layout == "nhwc" else torch.contiguous_format

    def median_ms(f):
        for _ in range(3):
            f()
        sync()
        times = []
        for _ in range(a.reps):
            t = time.perf_counter()
            f()
            sync()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)

    for c, h, w, o, k, s, pad in shapes:
        def make(*shape):
            return (torch.rand(*shape, device=a.device) * 2 - 1).to(dtype).to(memory_format=fmt)
        x, wt = make(a.batch, c, h, w), make(o, c, k, k)
        oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        gy = make(a.batch, o, oh, ow)

        def fwd():
            with torch.no_grad():
                F.conv2d(x, wt, stride=s, padding=pad)

        def fwd_loss():
            with torch.no_grad():
                (F.conv2d(x, wt, stride=s, padding=pad) * gy).sum()

        def backward(of_input):
            xi = x.detach().requires_grad_(of_input)
            wi = wt.detach().requires_grad_(not of_input)
            (F.conv2d(xi, wi, stride=s, padding=pad) * gy).sum().backward()

        t_fwd, t_loss = median_ms(fwd), median_ms(fwd_loss)
        t_data = median_ms(lambda: backward(True)) - t_loss
        t_weight = median_ms(lambda: backward(False)) - t_loss
        print(f"shape={a.batch},{c},{h},{w},{o},{k},{k},{s},{pad} dtype={a.dtype} layout={a.layout} "
              f"fwd_ms={t_fwd:.4f} bwd_data_ms={t_data:.4f} bwd_weight_ms={t_weight:.4f} "
              f"total_ms={t_fwd + t_data + t_weight:.4f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
