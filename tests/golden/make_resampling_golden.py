#!/usr/bin/env python3
"""Writes resampling_golden.txt: small fixed adaptive-average-pooling and interpolation problems
and PyTorch's answers.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64: y = F.adaptive_avg_pool2d(x, output_size) or F.interpolate(x, size | scale_factor, mode,
align_corners), and gx, the gradient of sum(y * gy). The adaptive output sizes cover overlapping
windows (7 rows into 3), the identity, an output larger than the input (windows that repeat
pixels) and the global mean. The interpolation cases cover nearest by size and by scale factor
(PyTorch's doubling shortcut, and 1.5, whose source step is 1 / 1.5 rather than in / out),
shrinking, and bilinear with and without align_corners, by size and by scale factor. Each case
draws from its own seeded generator, so adding a case leaves the others' numbers as they were.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_resampling_golden.py
The C++ test (tests/unit/autograd/ops/resampling_test.cpp) reads the file; it needs no Python.
Format: see tests/support/golden.hpp.
"""
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def adaptive_avg_pool(out, seed, name, shape, output_size):
    gen = torch.Generator().manual_seed(seed)
    x = fixed(shape, gen).requires_grad_()
    y = F.adaptive_avg_pool2d(x, output_size)
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append("case %s output_size %d %d" % (name, output_size[0], output_size[1]))
    for tname, t in (("x", x), ("gy", gy), ("y", y), ("gx", x.grad)):
        out.append(line(tname, t.detach()))


def interpolate(out, seed, name, shape, mode, align_corners=None, size=None, scale=None):
    gen = torch.Generator().manual_seed(seed)
    x = fixed(shape, gen).requires_grad_()
    y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align_corners)
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    head = "case %s mode %d align_corners %d" % (name, mode == "bilinear", bool(align_corners))
    if size is not None:
        head += " size %d %d" % size
    else:
        head += " scale %r %r" % scale
    out.append(head)
    for tname, t in (("x", x), ("gy", gy), ("y", y), ("gx", x.grad)):
        out.append(line(tname, t.detach()))


def main():
    out = []
    adaptive_avg_pool(out, 1, "adaptive_avg_pool_overlapping", (2, 3, 7, 5), (3, 2))
    adaptive_avg_pool(out, 2, "adaptive_avg_pool_identity", (1, 2, 4, 6), (4, 6))
    adaptive_avg_pool(out, 3, "adaptive_avg_pool_larger_output", (1, 2, 3, 3), (5, 4))
    adaptive_avg_pool(out, 4, "adaptive_avg_pool_global", (2, 2, 8, 8), (1, 1))
    interpolate(out, 5, "nearest_size", (2, 3, 5, 4), "nearest", size=(7, 9))
    interpolate(out, 6, "nearest_scale_2", (1, 2, 3, 4), "nearest", scale=(2.0, 2.0))
    interpolate(out, 7, "nearest_scale_1_5", (1, 2, 4, 5), "nearest", scale=(1.5, 1.5))
    interpolate(out, 8, "nearest_shrink", (1, 2, 7, 9), "nearest", size=(3, 4))
    interpolate(out, 9, "bilinear_size", (2, 2, 4, 5), "bilinear", align_corners=False, size=(7, 8))
    interpolate(out, 10, "bilinear_align_corners", (1, 2, 4, 5), "bilinear", align_corners=True, size=(7, 9))
    interpolate(out, 11, "bilinear_scale", (1, 2, 3, 4), "bilinear", align_corners=False, scale=(2.5, 1.5))
    interpolate(out, 12, "bilinear_shrink", (1, 2, 8, 7), "bilinear", align_corners=False, size=(3, 5))
    with open(os.path.join(HERE, "resampling_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
