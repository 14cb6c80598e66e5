#!/usr/bin/env python3
"""Writes norm_pool_golden.txt: small fixed batch-norm and pooling problems and PyTorch's answers.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64. Batch norm in training mode runs `steps` batches through one BatchNorm2d, so the file
holds the running statistics after k steps, and the last step's output and gradients of
sum(y * gy). Max pooling gets inputs without ties (distinct multiples of 1/64), so that the
gradient's route is unique.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_norm_pool_golden.py
The C++ test (tests/unit/autograd/ops/norm_pool_golden_test.cpp) reads the file; it needs no Python.
Format: see tests/support/golden.hpp.
"""
import os

import torch
import torch.nn.functional as F


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def distinct(shape, gen):
    n = 1
    for d in shape:
        n *= d
    values = (torch.arange(n, dtype=torch.float64) - n // 2) / 64
    return values[torch.randperm(n, generator=gen)].reshape(shape)


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def batch_norm_train(out, gen, name, shape, steps, momentum, eps):
    c = shape[1]
    bn = torch.nn.BatchNorm2d(c, eps=eps, momentum=momentum).double()
    with torch.no_grad():
        bn.weight.copy_(fixed((c,), gen))
        bn.bias.copy_(fixed((c,), gen))
    out.append("case %s steps %d momentum %r eps %r" % (name, steps, momentum, eps))
    out.append(line("w", bn.weight.detach()))
    out.append(line("b", bn.bias.detach()))
    for k in range(steps):
        x = fixed(shape, gen).requires_grad_()
        y = bn(x)
        out.append(line("x%d" % k, x.detach()))
        if k == steps - 1:
            bn.weight.grad = None
            bn.bias.grad = None
            gy = fixed(shape, gen)
            (y * gy).sum().backward()
            for tname, t in (("gy", gy), ("y", y), ("gx", x.grad), ("gw", bn.weight.grad), ("gb", bn.bias.grad)):
                out.append(line(tname, t.detach()))
    out.append(line("running_mean", bn.running_mean))
    out.append(line("running_var", bn.running_var))


def batch_norm_eval(out, gen, name, shape, eps):
    c = shape[1]
    x, w, b = fixed(shape, gen), fixed((c,), gen), fixed((c,), gen)
    rm = fixed((c,), gen)
    rv = torch.rand((c,), generator=gen, dtype=torch.float64) + 0.5
    rv = torch.round(rv * 64) / 64
    y = F.batch_norm(x, rm, rv, w, b, training=False, eps=eps)
    out.append("case %s eps %r" % (name, eps))
    for tname, t in (("x", x), ("w", w), ("b", b), ("running_mean", rm), ("running_var", rv), ("y", y)):
        out.append(line(tname, t))


def pool(out, gen, name, shape, kind, kernel, stride, padding, count_include_pad=True):
    x = (distinct(shape, gen) if kind == "max" else fixed(shape, gen)).requires_grad_()
    if kind == "max":
        y = F.max_pool2d(x, kernel, stride, padding)
    elif kind == "avg":
        y = F.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)
    else:
        y = F.adaptive_avg_pool2d(x, 1).flatten(1)
    gy = fixed(tuple(y.shape), gen)
    (y * gy).sum().backward()
    out.append("case %s kind %d kernel %d %d stride %d %d padding %d %d include_pad %d"
               % (name, ["max", "avg", "global"].index(kind), *kernel, *stride, *padding, int(count_include_pad)))
    for tname, t in (("x", x), ("gy", gy), ("y", y), ("gx", x.grad)):
        out.append(line(tname, t.detach()))


def main():
    gen = torch.Generator().manual_seed(20261201)
    out = []
    batch_norm_train(out, gen, "batch_norm_train", (4, 3, 5, 6), steps=3, momentum=0.1, eps=1e-5)
    batch_norm_train(out, gen, "batch_norm_train_momentum", (2, 5, 3, 3), steps=4, momentum=0.3, eps=1e-3)
    batch_norm_eval(out, gen, "batch_norm_eval", (2, 4, 3, 5), eps=1e-5)
    pool(out, gen, "max_pool", (2, 3, 7, 6), "max", (3, 3), (2, 2), (1, 1))
    pool(out, gen, "avg_pool", (2, 3, 7, 6), "avg", (3, 3), (2, 2), (1, 1))
    pool(out, gen, "avg_pool_exclude_pad", (1, 2, 5, 6), "avg", (2, 3), (1, 1), (1, 1), count_include_pad=False)
    pool(out, gen, "global_avg_pool", (3, 4, 5, 3), "global", (1, 1), (1, 1), (0, 0))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "norm_pool_golden.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
