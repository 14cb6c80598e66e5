#!/usr/bin/env python3
"""Writes optimizer_golden.txt: a few steps of each update rule on fixed parameters and gradients.

Four parameter tensors (a matrix, a vector, a 3-D tensor and a vector that starts at zero, so that
LAMB's and LARS's "norm is zero" cases are taken) are updated `steps` times from fixed gradients.
Inputs are fixed pseudo-random multiples of 1/64 (exact in float32), and the weight decays are
powers of two, so that weight_decay * p is exact too: a gradient that cancels it exactly (which
multiples of 1/64 make likely) must leave zero in float32 as in float64, not a rounding residue
that a small eps turns into a step. The trajectories are
PyTorch's, in float64: torch.optim.AdamW, RMSprop and Adagrad themselves, and for LAMB and LARS,
which torch 1.13 does not have, the formulas of docs/optimizers.md written out in plain torch.

Run from the repository root with a Python that has torch (Debian's python3-torch):
    python3 tests/golden/make_optimizer_golden.py
The C++ test (tests/unit/optim/rules_golden_test.cpp) reads the file; it needs no Python.
Format: see tests/support/golden.hpp. Per case: the initial parameters `p_NAME`, the gradients of
step k `gK_NAME`, and the parameters after step k `pK_NAME` (k from 1).
"""
import os

import torch

SHAPES = [("a", (3, 5)), ("b", (4,)), ("c", (2, 3, 2)), ("z", (3,))]
STEPS = 4


def fixed(shape, gen):
    return torch.round((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 64) / 64


def line(name, t):
    dims = ",".join(str(d) for d in t.shape)
    return name + " " + dims + " " + " ".join(repr(float(v)) for v in t.reshape(-1).tolist())


def lamb_step(params, state, lr, beta1, beta2, eps, weight_decay):
    state["t"] = state.get("t", 0) + 1
    t = state["t"]
    for i, p in enumerate(params):
        m, v = state.setdefault(i, (torch.zeros_like(p), torch.zeros_like(p)))
        g = p.grad
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        u = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps) + weight_decay * p
        w_norm, u_norm = p.norm(), u.norm()
        trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        p.sub_(lr * trust * u)


def lars_step(params, state, lr, momentum, weight_decay, trust_coefficient, excluded):
    for i, p in enumerate(params):
        vel = state.setdefault(i, torch.zeros_like(p))
        g = p.grad
        if excluded[i]:
            local, wd = 1.0, 0.0
        else:
            w_norm, g_norm = p.norm(), g.norm()
            wd = weight_decay
            local = trust_coefficient * w_norm / (g_norm + weight_decay * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
        vel.mul_(momentum).add_(lr * local * (g + wd * p))
        p.sub_(vel)


def run(out, gen, name, settings, make_step):
    out.append("case %s %s" % (name, " ".join("%s %r" % (k, float(v)) for k, v in settings.items())))
    params = []
    for pname, shape in SHAPES:
        p = torch.zeros(shape, dtype=torch.float64) if pname == "z" else fixed(shape, gen)
        out.append(line("p_" + pname, p))
        params.append(p.requires_grad_())
    step = make_step(params)
    for k in range(1, STEPS + 1):
        for (pname, _), p in zip(SHAPES, params):
            p.grad = fixed(p.shape, gen)
            out.append(line("g%d_%s" % (k, pname), p.grad))
        with torch.no_grad():
            step()
        for (pname, _), p in zip(SHAPES, params):
            out.append(line("p%d_%s" % (k, pname), p.detach()))


def torch_rule(cls, **kw):
    return lambda params: cls(params, **kw).step


def main():
    gen = torch.Generator().manual_seed(27)
    out = []
    for name, kw in [
        ("adamw", dict(lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.125)),
        ("adamw_large_eps", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-3, weight_decay=1 / 64)),
    ]:
        s = dict(lr=kw["lr"], beta1=kw["betas"][0], beta2=kw["betas"][1], eps=kw["eps"], weight_decay=kw["weight_decay"])
        run(out, gen, name, s, torch_rule(torch.optim.AdamW, **kw))
    for name, kw in [
        ("rmsprop", dict(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False)),
        ("rmsprop_momentum", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.125, momentum=0.9, centered=False)),
        ("rmsprop_centered", dict(lr=0.005, alpha=0.95, eps=1e-4, weight_decay=0.0625, momentum=0.5, centered=True)),
    ]:
        run(out, gen, name, kw, torch_rule(torch.optim.RMSprop, **kw))
    for name, kw in [
        ("adagrad", dict(lr=0.1, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10)),
        ("adagrad_decay", dict(lr=0.1, lr_decay=0.05, weight_decay=0.0625, initial_accumulator_value=0.25, eps=1e-3)),
    ]:
        run(out, gen, name, kw, torch_rule(torch.optim.Adagrad, **kw))
    for name, kw in [
        ("lamb", dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=1 / 128)),
        ("lamb_no_decay", dict(lr=0.05, beta1=0.8, beta2=0.99, eps=1e-3, weight_decay=0.0)),
    ]:
        run(out, gen, name, kw, lambda params, kw=kw: (lambda st={}: lambda: lamb_step(params, st, **kw))())
    for name, kw, exclude_1d in [
        ("lars", dict(lr=0.1, momentum=0.9, weight_decay=1 / 1024, trust_coefficient=0.02), False),
        ("lars_exclude_1d", dict(lr=0.1, momentum=0.8, weight_decay=1 / 256, trust_coefficient=0.05), True),
    ]:
        excluded = [len(shape) <= 1 for _, shape in SHAPES] if exclude_1d else [False] * len(SHAPES)
        s = dict(kw, exclude_1d=int(exclude_1d))
        run(out, gen, name, s,
            lambda params, kw=kw, excluded=excluded: (lambda st={}: lambda: lars_step(params, st, excluded=excluded, **kw))())
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimizer_golden.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
