#!/usr/bin/env python3
"""Writes conv_transpose_golden.txt and conv_transpose2d_module_state_dict.safetensors beside it:
small fixed conv_transpose2d problems and PyTorch's answers, and a PyTorch nn.ConvTranspose2d
whose state_dict the C++ test loads by name.

For each op case: the input x, weight w (in, out/groups, kh, kw), bias b and an output gradient gy
(fixed pseudo-random multiples of 1/64, exact in float32), and PyTorch's float64 results for
y = F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation) and the
gradients of sum(y * gy) with respect to x, w and b. The cases cover a plain one, stride with
padding and output_padding, dilation, groups and a depthwise upsampling. The module case is a
float32 nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2) with fixed
parameters: its state_dict (weight, bias), the input x and PyTorch's output y.

Run from the repository root with a Python that has torch:
    python3 tests/golden/make_conv_transpose_golden.py
The C++ test (tests/unit/autograd/ops/conv_transpose_test.cpp) reads the files; it needs no Python.
Format: see tests/support/golden.hpp; the safetensors writer is make_normalization_golden.py's.
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_normalization_golden import fixed, line, module_case  # noqa: E402

CASES = [
    # name, x shape, w shape, stride, padding, output_padding, dilation, groups
    ("plain", (2, 3, 4, 5), (3, 4, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    ("strided_output_padding", (1, 2, 3, 4), (2, 3, 3, 2), (2, 3), (1, 0), (1, 2), (1, 1), 1),
    ("dilated", (1, 2, 4, 4), (2, 2, 3, 3), (1, 2), (2, 1), (0, 1), (2, 3), 1),
    ("grouped", (2, 4, 3, 3), (4, 3, 3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 2),
    ("depthwise_upsampling", (1, 3, 3, 4), (3, 1, 4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 3),
]


def op_case(out, seed, name, xs, ws, stride, padding, output_padding, dilation, groups):
    gen = torch.Generator().manual_seed(seed)
    x = fixed(xs, gen).requires_grad_()
    w = fixed(ws, gen).requires_grad_()
    b = fixed((ws[1] * groups,), gen).requires_grad_()
    y = F.conv_transpose2d(x, w, b, stride=stride, padding=padding, output_padding=output_padding,
                           groups=groups, dilation=dilation)
    gy = fixed(tuple(y.shape), gen)
    (y * gy).sum().backward()
    out.append("case %s stride %d %d padding %d %d output_padding %d %d dilation %d %d groups %d"
               % (name, *stride, *padding, *output_padding, *dilation, groups))
    for tname, t in (("x", x), ("w", w), ("b", b), ("gy", gy), ("y", y), ("gx", x.grad), ("gw", w.grad),
                     ("gb", b.grad)):
        out.append(line(tname, t.detach()))


def main():
    out = []
    for seed, case in enumerate(CASES, start=1):
        op_case(out, seed, *case)
    module = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    module_case(out, 10, "conv_transpose2d_module", module, (2, 4, 3, 5), {})
    with open(os.path.join(HERE, "conv_transpose_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
