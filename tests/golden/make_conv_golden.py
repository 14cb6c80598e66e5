#!/usr/bin/env python3
"""Writes conv_golden.txt: small fixed conv2d problems and PyTorch's answers.

For each case: the input x, weight w, bias b and an output gradient gy (fixed pseudo-random
values, rounded to 1/64 so that they are exact in float32), and PyTorch's float64 results for
y = conv2d(x, w, b) and the gradients of sum(y * gy) with respect to x, w and b.

Run from the repository root with a Python that has torch:
    python3 tests/golden/make_conv_golden.py
The C++ test (tests/unit/autograd/ops/conv_golden_test.cpp) reads the file; it needs no Python.

Format: a line `case NAME stride SH SW padding PH PW dilation DH DW groups G`, then one line per
tensor: `NAME D0,D1,... v0 v1 ...` (values in row-major order).
"""
import os

import torch
import torch.nn.functional as F

CASES = [
    # name, x shape, w shape, stride, padding, dilation, groups
    ("plain", (2, 3, 5, 6), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1),
    ("padded_strided", (1, 2, 7, 6), (3, 2, 3, 2), (2, 3), (1, 0), (1, 1), 1),
    ("dilated", (1, 2, 7, 7), (2, 2, 3, 3), (1, 1), (2, 1), (2, 3), 1),
    ("grouped", (2, 4, 5, 5), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),
    ("depthwise", (1, 3, 6, 5), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1), 3),
]


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def main():
    gen = torch.Generator().manual_seed(20240601)
    out = []
    for name, xs, ws, stride, padding, dilation, groups in CASES:
        x = fixed(xs, gen).requires_grad_()
        w = fixed(ws, gen).requires_grad_()
        b = fixed((ws[0],), gen).requires_grad_()
        y = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        gy = fixed(tuple(y.shape), gen)
        (y * gy).sum().backward()
        out.append("case %s stride %d %d padding %d %d dilation %d %d groups %d"
                   % (name, *stride, *padding, *dilation, groups))
        for tname, t in (("x", x), ("w", w), ("b", b), ("gy", gy), ("y", y), ("gx", x.grad), ("gw", w.grad),
                         ("gb", b.grad)):
            out.append(line(tname, t.detach()))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_golden.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
