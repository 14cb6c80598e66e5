#!/usr/bin/env python3
"""Writes elementwise_golden.txt: small fixed problems for the elementwise ops, the reductions
along dimensions and the losses, with PyTorch's answers.

Inputs are fixed pseudo-random multiples of 1/64 (exact in float32); results are PyTorch's, in
float64. Each case holds its inputs, the weighting gy of the backward pass (the gradients are
those of sum(y * gy)), the output y and the gradient of every differentiable input (g<name>).
Integer tensors (labels, masks, indices) are written as numbers too, and 0-d results (reduced
losses) with shape (1,). Inputs of max and min have
no ties (distinct multiples of 1/64), so the gradient's route is unique.

Run from the repository root with a Python that has torch:
    python3 tests/golden/make_elementwise_golden.py
The C++ test (tests/unit/autograd/ops/elementwise_golden_test.cpp) reads the file; it needs no
Python. Format: see tests/support/golden.hpp.
"""
import os

import torch
import torch.nn.functional as F

from make_norm_pool_golden import distinct  # the script's folder is on the import path


def fixed(shape, gen, lo=-1.0, hi=1.0):
    u = torch.rand(shape, generator=gen, dtype=torch.float64)
    return torch.round((lo + (hi - lo) * u) * 64) / 64


def line(name, t):
    t = torch.as_tensor(t)
    if t.dim() == 0:
        t = t.reshape(1)  # the format has no 0-d tensors; the test knows which results are scalars
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def emit(out, gen, name, params, inputs, fn, extra=()):
    """inputs: list of (name, tensor, differentiable); fn maps the inputs to y (or (y, indices))."""
    out.append(("case %s " % name + " ".join("%s %r" % (k, v) for k, v in params)).rstrip())
    leaves = []
    for iname, t, diff in inputs:
        out.append(line(iname, t))
        leaves.append(t.clone().requires_grad_(True) if diff else t)
    for ename, t in extra:
        out.append(line(ename, t))
    result = fn(*leaves)
    y, idx = (result if isinstance(result, tuple) else (result, None))
    gy = fixed(y.shape, gen)
    (y * gy).sum().backward()
    out.append(line("gy", gy))
    out.append(line("y", y.detach()))
    if idx is not None:
        out.append(line("indices", idx))
    for (iname, _, diff), leaf in zip(inputs, leaves):
        if diff:
            out.append(line("g" + iname, leaf.grad))


def main():
    gen = torch.Generator().manual_seed(27)
    out = []
    # --- elementwise -----------------------------------------------------------------------
    x = fixed((3, 5), gen)
    pos = fixed((3, 5), gen, 0.25, 2.0)
    emit(out, gen, "exp", [], [("x", x, True)], torch.exp)
    emit(out, gen, "log", [], [("x", pos, True)], torch.log)
    emit(out, gen, "sqrt", [], [("x", pos, True)], torch.sqrt)
    emit(out, gen, "rsqrt", [], [("x", pos, True)], torch.rsqrt)
    emit(out, gen, "abs", [], [("x", x, True)], torch.abs)
    emit(out, gen, "neg", [], [("x", x, True)], torch.neg)
    emit(out, gen, "pow_scalar", [("exponent", 2.5)], [("x", pos, True)], lambda a: torch.pow(a, 2.5))
    emit(out, gen, "pow_scalar", [("exponent", 3.0)], [("x", x, True)], lambda a: torch.pow(a, 3.0))
    emit(out, gen, "pow", [], [("a", fixed((2, 3, 4), gen, 0.25, 2.0), True), ("b", fixed((3, 1), gen, -2, 2), True)],
         torch.pow)
    emit(out, gen, "clamp", [("min", -0.25), ("max", 0.5)], [("x", x, True)], lambda a: torch.clamp(a, -0.25, 0.5))
    emit(out, gen, "clamp_min", [("min", 0.125)], [("x", x, True)], lambda a: torch.clamp(a, min=0.125))
    emit(out, gen, "clamp_max", [("max", -0.125)], [("x", x, True)], lambda a: torch.clamp(a, max=-0.125))
    emit(out, gen, "div", [], [("a", fixed((2, 3, 4), gen), True), ("b", fixed((3, 1), gen, 0.5, 2.0), True)],
         torch.div)
    emit(out, gen, "div", [], [("a", fixed((4, 1), gen), True), ("b", fixed((1, 5), gen, 0.5, 2.0), True)], torch.div)
    emit(out, gen, "mul", [], [("a", fixed((2, 1, 4), gen), True), ("b", fixed((3, 1), gen), True)], torch.mul)
    cond = (torch.rand((3, 1), generator=gen) < 0.5).to(torch.uint8)
    emit(out, gen, "where", [], [("cond", cond, False), ("a", fixed((2, 3, 4), gen), True), ("b", fixed((4,), gen), True)],
         lambda c, a, b: torch.where(c.bool(), a, b))
    mask = (torch.rand((1, 5), generator=gen) < 0.5).to(torch.uint8)
    emit(out, gen, "masked_fill", [("value", -2.5)], [("x", x, True), ("mask", mask, False)],
         lambda a, m: a.masked_fill(m.bool(), -2.5))
    # --- reductions ------------------------------------------------------------------------
    r = fixed((2, 3, 4, 5), gen)
    for dims, keep in (((1,), False), ((-1,), True), ((0, 2), False), ((1, 2), True), ((), False)):
        params = [("keepdim", int(keep))] + [("dim", d) for d in dims]
        emit(out, gen, "sum", params, [("x", r, True)], lambda a, dims=dims, keep=keep: torch.sum(a, dims, keep))
        emit(out, gen, "mean", params, [("x", r, True)], lambda a, dims=dims, keep=keep: torch.mean(a, dims, keep))
    d = distinct((3, 4, 5), gen)
    for dim, keep in ((0, False), (1, True), (-1, False)):
        params = [("dim", dim), ("keepdim", int(keep))]
        emit(out, gen, "max", params, [("x", d, True)], lambda a, dim=dim, keep=keep: tuple(torch.max(a, dim, keep)))
        emit(out, gen, "min", params, [("x", d, True)], lambda a, dim=dim, keep=keep: tuple(torch.min(a, dim, keep)))
    # --- losses ----------------------------------------------------------------------------
    reductions = ("none", "mean", "sum")
    logp = torch.log_softmax(fixed((6, 4), gen, -2, 2), 1)
    labels = torch.tensor([0, 3, -100, 2, 1, 3])
    logp3 = torch.log_softmax(fixed((2, 3, 4), gen, -2, 2), 1)
    labels3 = torch.tensor([[0, 2, 1, -100], [2, 2, 0, 1]])
    xp = fixed((4, 3), gen, 0.0625, 0.9375)
    t01 = fixed((4, 3), gen, 0, 1)
    logits = fixed((4, 3), gen, -3, 3)
    pw = fixed((3,), gen, 0.5, 3)
    a, b = fixed((4, 3), gen, -2, 2), fixed((4, 3), gen, -2, 2)
    for k, red in enumerate(reductions):
        p = [("reduction", k)]
        emit(out, gen, "nll_loss", p, [("x", logp, True)], lambda v, red=red: F.nll_loss(v, labels, reduction=red),
             extra=[("labels", labels)])
        emit(out, gen, "nll_loss", p, [("x", logp3, True)], lambda v, red=red: F.nll_loss(v, labels3, reduction=red),
             extra=[("labels", labels3)])
        emit(out, gen, "binary_cross_entropy", p, [("x", xp, True), ("target", t01, False)],
             lambda v, t, red=red: F.binary_cross_entropy(v, t, reduction=red))
        emit(out, gen, "binary_cross_entropy_with_logits", p, [("x", logits, True), ("target", t01, False)],
             lambda v, t, red=red: F.binary_cross_entropy_with_logits(v, t, reduction=red))
        emit(out, gen, "binary_cross_entropy_with_logits_pw", p,
             [("x", logits, True), ("target", t01, False), ("pos_weight", pw, False)],
             lambda v, t, w, red=red: F.binary_cross_entropy_with_logits(v, t, reduction=red, pos_weight=w))
        emit(out, gen, "l1_loss", p, [("x", a, True), ("target", b, True)],
             lambda v, t, red=red: F.l1_loss(v, t, reduction=red))
        emit(out, gen, "smooth_l1_loss", p + [("beta", 0.5)], [("x", a, True), ("target", b, True)],
             lambda v, t, red=red: F.smooth_l1_loss(v, t, reduction=red, beta=0.5))
        emit(out, gen, "mse_loss", p, [("x", a, True), ("target", b, True)],
             lambda v, t, red=red: F.mse_loss(v, t, reduction=red))
    # --- GELU, exact and with the tanh approximation (own generator: the cases above keep their
    # numbers); inputs over [-4, 4] reach both tails.
    ggen = torch.Generator().manual_seed(31)
    gx = fixed((4, 6), ggen, -4.0, 4.0)
    for k, approximate in enumerate(("none", "tanh")):
        emit(out, ggen, "gelu", [("approximate", k)], [("x", gx, True)],
             lambda a, approximate=approximate: F.gelu(a, approximate=approximate))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elementwise_golden.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
