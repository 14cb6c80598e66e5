#!/usr/bin/env python3
"""The PyTorch side of bench_optimizer_step: one torch.optim.AdamW step over ResNet-50's parameter
shapes (torchvision's resnet50, the same 161 tensors as dpl's models::resnet("resnet50")), timed
the same way (median of per-step times with a device synchronisation after each; fixed random
gradients of magnitude 1e-3). Runs the fused implementation (fused=True) and the multi-tensor one
(foreach=True), each printing one record comparable with bench_optimizer_step's:

  impl=torch-fused what=optimizer_step optimizer=adamw groups=none arch=resnet50 device=cuda tensors=161
  elements=25557032 iters=200 ms_per_step=... gb_per_s=...

  python3 torch_optimizer_peer.py [--iters 200] [--warmup 20] [--arch resnet50] [--impl fused,foreach]
                                  [--groups none|no-decay-1d]
"""
import argparse
import statistics
import sys
import time

import torch


def parameter_shapes(arch):
    import torchvision

    model = getattr(torchvision.models, arch)()
    return [p.shape for p in model.parameters()]


def run(impl, shapes, iters, warmup, arch, groups):
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = [torch.empty(s, device="cuda").uniform_(-0.1, 0.1, generator=gen) for s in shapes]
    for p in params:
        p.grad = torch.empty_like(p).uniform_(-1e-3, 1e-3, generator=gen)
    kwargs = {"fused": True} if impl == "fused" else {"foreach": True}
    if groups == "no-decay-1d":  # the same two groups as bench_optimizer_step --groups no-decay-1d
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() > 1], "weight_decay": 0.01},
                                 {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}],
                                lr=1e-3, **kwargs)
    else:
        opt = torch.optim.AdamW(params, lr=1e-3, **kwargs)
    for _ in range(warmup):
        opt.step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    elements = sum(p.numel() for p in params)
    # param, grad, exp_avg and exp_avg_sq read; param, exp_avg and exp_avg_sq written (float32).
    gb_per_s = 28.0 * elements / (ms * 1e6)
    print("impl=torch-%s what=optimizer_step optimizer=adamw groups=%s arch=%s device=cuda tensors=%d elements=%d "
          "iters=%d ms_per_step=%.4f gb_per_s=%.1f" % (impl, groups, arch, len(params), elements, iters, ms, gb_per_s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--impl", default="fused,foreach", help="comma-separated: fused, foreach")
    ap.add_argument("--groups", default="none", choices=["none", "no-decay-1d"],
                    help="no-decay-1d: weight decay 0.01, none on the 1-D parameters")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_optimizer_peer.py: needs a CUDA device")
    shapes = parameter_shapes(args.arch)
    for impl in args.impl.split(","):
        try:
            run(impl, shapes, args.iters, args.warmup, args.arch, args.groups)
        except (RuntimeError, TypeError) as e:  # a torch without fused AdamW says so and goes on
            print("impl=torch-%s what=optimizer_step optimizer=adamw unavailable=%r" % (impl, str(e)))


if __name__ == "__main__":
    main()
